"""onnxruntime-genai runtime for generators in its own layout (genai_config.json + model.onnx):
OgaGenerator (generator.py) prepares requests; lanes.py steps the engine's batch. The scheduler
that drives it is inferd/scheduling/genai.py; the kind's loader is inferd/kinds/generator.py."""

from inferd.runtimes.onnx_genai.generator import OgaGenerator, is_genai_folder, load_generator

__all__ = ["OgaGenerator", "is_genai_folder", "load_generator"]
