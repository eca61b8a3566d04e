"""Runtime-neutral numeric helpers shared by several runtimes (ONNX, llama.cpp embedders):
pooling and normalisation, task prefixes, extraction spans and labels. numpy only."""
