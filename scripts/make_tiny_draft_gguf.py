"""The draft model for the speculative-decoding tests: the tiny llama fixture's code and seed
with one layer instead of two, so its vocabulary, embeddings, output head and first layer are
the target's own (its greedy tokens often agree with the target's: drafts get accepted).

`--other-vocab` drops the last BPE merge: a vocabulary one token smaller, for the test that a
draft model with another vocabulary is refused.

Regenerate the committed fixtures (deterministic, seed 0):
    python scripts/make_tiny_draft_gguf.py tests/fixtures/gguf/tiny-llama-draft.gguf
    python scripts/make_tiny_draft_gguf.py tests/fixtures/gguf/tiny-llama-othervocab.gguf --other-vocab
needs: pip install gguf numpy"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import make_tiny_gguf  # noqa: E402

if __name__ == "__main__":
    make_tiny_gguf.N_LAYER = 1
    if "--other-vocab" in sys.argv:
        make_tiny_gguf.MERGES = make_tiny_gguf.MERGES[:-1]
    make_tiny_gguf.main(sys.argv[1])
