"""llama.cpp runtime for generators: model loading (model.py), the multi-sequence context and
batch (context.py), sampler chains (sampling.py), and LlamaGenerator (generator.py), which
ties them to the continuous-batching engine in inferd/scheduling/generation.py."""

from inferd.runtimes.llama_cpp.generator import LlamaGenerator, load_generator

__all__ = ["LlamaGenerator", "load_generator"]
