"""Fill-in-the-middle prompts from a model's own FIM tokens, in llama-server's layout.

The GGUF names its FIM tokens (tokenizer.ggml.fim_pre_token_id, fim_suf, fim_mid, and for
repository-level models fim_rep and fim_sep); the runtime reports them as ids, -1 where
absent. A model without prefix, suffix and middle tokens cannot infill: a 400 naming the
ones it lacks, never a prompt glued together from text that only looks like FIM markers.

Layout (llama-server's /infill, README "repo-level pattern"):

    [BOS] [<FIM_REP>myproject\\n (<FIM_SEP>{filename}\\n{text})* <FIM_SEP>filename\\n]
          <FIM_PRE>{prefix}<FIM_SUF>{suffix}<FIM_MID>{prompt}

Without FIM_REP / FIM_SEP, each extra chunk follows a "\\n\\n--- snippet ---\\n\\n" line
instead. Budgets as llama-server's: the prefix keeps its last 3/4 of a batch, the suffix its
first quarter less the prompt, the extra context what the context has left after a batch and
twice n_predict (its last tokens, the chunks nearest the file). Differences on purpose: BOS
comes first (llama-server puts the extra context before BOS), and `prompt` goes after
FIM_MID, as its README documents. Pure: the runtime's tokenizer is passed in."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from inferd.errors import CapabilityMissing
from inferd.types import Infill

REQUIRED = ("pre", "suf", "mid")
GGUF_KEYS = {k: f"tokenizer.ggml.fim_{k}_token_id" for k in ("pre", "suf", "mid", "pad", "rep", "sep")}
SNIPPET = "\n\n--- snippet ---\n\n"


def check_fim(model: str, fim: Mapping[str, int], param: str) -> None:
    missing = [GGUF_KEYS[k] for k in REQUIRED if fim.get(k, -1) < 0]
    if missing:
        raise CapabilityMissing(f"{param}: model '{model}' cannot fill in the middle: its GGUF has no "
                                f"{', '.join(missing)}")


def infill_tokens(tokenize: Callable[[str], list[int]], fim: Mapping[str, int], bos: int | None,
                  infill: Infill, n_batch: int, n_ctx: int, n_predict: int) -> list[int]:
    """The prompt token ids. `tokenize` takes plain text (no BOS, special tokens as text);
    `bos` is the id to start with, or None when the vocabulary adds none."""
    rep, sep = fim.get("rep", -1), fim.get("sep", -1)
    extra: list[int] = []
    if rep >= 0:
        extra += [rep, *tokenize("myproject\n")]
    for filename, text in infill.extra:
        extra += [sep, *tokenize(filename + "\n")] if sep >= 0 else tokenize(SNIPPET)
        extra += tokenize(text)
    if sep >= 0:
        extra += [sep, *tokenize("filename\n")]
    prefix, suffix, prompt = tokenize(infill.prefix), tokenize(infill.suffix), tokenize(infill.prompt)
    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * max(0, n_predict)), len(extra))
    out = [bos] if bos is not None else []
    out += extra[len(extra) - n_extra:]
    out += [fim["pre"], *prefix[len(prefix) - n_prefix:], fim["suf"], *suffix[:n_suffix], fim["mid"], *prompt]
    return out


__all__ = ["GGUF_KEYS", "check_fim", "infill_tokens"]
