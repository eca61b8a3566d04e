"""Runtime-neutral numeric helpers shared by several runtimes (ONNX, llama.cpp embedders):
pooling and normalisation, task prefixes. numpy only."""
