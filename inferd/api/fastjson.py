"""A JSON response rendered by orjson, for bodies full of numbers (embedding vectors).

Starlette's JSONResponse runs `json.dumps` over Python floats: for one 384-dimension vector
that is `ndarray.tolist()` plus 384 float reprs, tens of microseconds per vector. orjson
writes a float32 numpy array directly, each value as the shortest text that reads back as
the same float32 (what the model computed; a float64 repr of it only adds digits that carry
nothing), and the rest of the body (dicts, lists, str, int) as json.dumps would, as UTF-8.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def dumps(content: Any) -> bytes:
    return orjson.dumps(content, option=_OPTIONS)


class FastJSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)
