"""Engine rules that hold for every face: how many stop strings, how long each may be, how
many logit_bias entries. The faces only translate their fields; the limits live here so
/v1/completions, /api/generate and /ai/v1/generate cannot disagree about them."""

from __future__ import annotations

from inferd.errors import InvalidInput
from inferd.types import GenerateRequest

MAX_STOPS = 16            # llama-server and vLLM accept more than OpenAI's 4; each costs per-token work
MAX_STOP_CHARS = 512
MAX_LOGIT_BIAS = 1024     # entries; each is applied to every sampled token


def check_engine_limits(req: GenerateRequest, stop_param: str = "stop") -> None:
    if len(req.stop) > MAX_STOPS:
        raise InvalidInput(f"at most {MAX_STOPS} stop sequences (got {len(req.stop)})", stop_param)
    for s in req.stop:
        if len(s) > MAX_STOP_CHARS:
            raise InvalidInput(f"a stop sequence may have at most {MAX_STOP_CHARS} characters "
                               f"(got {len(s)})", stop_param)
    n = len(req.sampling.logit_bias)
    if n > MAX_LOGIT_BIAS:
        raise InvalidInput(f"logit_bias may have at most {MAX_LOGIT_BIAS} entries (got {n})", "logit_bias")
