"""Antfly /ml/v1/predict request bodies -> (model name, 2-D feature matrix). Pure functions.

Two bodies are read:
  application/json   {"model": NAME, "input": [[...], ...]}: numbers; null (or a NaN literal)
                     marks a missing value.
  application/x-npy  a .npy file holding one 2-D integer or float array [rows, features];
                     the model comes from the query (?model=NAME). NaN marks a missing value.

Why not pydantic: validating a 10,000 x 20 body as `list[list[float | None]]` checks 200,000
Python floats one by one, most of a ~300 ms round trip. Here orjson parses the body, numpy
converts the rows in C, and the per-value Python scan runs only when cheap byte counts say the
body may hold something other than numbers and nulls (a string, true/false), to name the bad
value. The feature count, infinities and the float32 range are checked against the model later
(runtimes/tabular/evaluate.to_matrix), where the model's feature count is known."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from inferd.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType, echo

NPY = "application/x-npy"
_NUMBER = (int, float, type(None))  # bool is not in it: type(True) is bool
_NPY_MAGIC = b"\x93NUMPY"
_NOT_COUNTED = bytes(c for c in range(256) if c not in b'"rf')  # the bytes _only_numbers deletes


@dataclass(frozen=True)
class PredictInput:
    model: str
    # 2-D [rows, features]: float64 from JSON, the .npy file's own numeric dtype; JSON rows of
    # different lengths stay lists (their numbers checked) for the check against the model.
    x: np.ndarray | list[list[float | None]]


def media_type(content_type: str | None) -> str:
    """'Application/JSON; charset=utf-8' -> 'application/json'."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse(content_type: str | None, body: bytes, query: Sequence[tuple[str, str]], max_rows: int) -> PredictInput:
    """The request's model and matrix, or InvalidInput (400) / PayloadTooLarge (413, more than
    `max_rows` rows) / UnsupportedMediaType (415). `query`: the URL's (name, value) pairs."""
    kind = media_type(content_type)
    if kind == "application/json" or kind.endswith("+json"):
        if body[:6] == _NPY_MAGIC:  # `curl --data-binary @x.npy` without -H: curl says form data, read as JSON
            raise InvalidInput(f"the body is a .npy file, sent as JSON: send it with Content-Type: {NPY}")
        if any(name == "model" for name, _ in query):
            raise InvalidInput("the query parameter 'model' is for binary bodies (application/x-npy); "
                               "a JSON body names its model in the body", "model")
        return parse_json(body, max_rows)
    if kind == NPY:
        return parse_npy(body, query, max_rows)
    raise UnsupportedMediaType(f"Content-Type {echo(kind)!r} is not read here: send application/json "
                               f"or {NPY} (a .npy file, with ?model=NAME)")


# -- JSON ---------------------------------------------------------------------------------


def _loads(body: bytes) -> object:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    # orjson refuses NaN/Infinity literals and numbers beyond float64, which Python's own
    # json module (and so this API before) accepts: parse those bodies the slow way.
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:
        raise InvalidInput(f"malformed JSON body: {e}") from None


def parse_json(body: bytes, max_rows: int) -> PredictInput:
    data = _loads(body)
    if type(data) is not dict:
        raise InvalidInput('the request body must be a JSON object: {"model": NAME, "input": [[...], ...]}')
    for key in data:
        if key not in ("model", "input"):
            raise InvalidInput(f"{echo(key)}: unknown field; the body takes only 'model' and 'input'", key)
    for key in ("model", "input"):
        if key not in data:
            raise InvalidInput(f"'{key}' is required", key)
    model = data["model"]
    if type(model) is not str:
        raise InvalidInput("model: must be a string", "model")
    return PredictInput(model, rows_to_matrix(data["input"], max_rows, _only_numbers(body, model)))


def _only_numbers(body: bytes, model: str) -> bool:
    """Whether the body's "input" can hold nothing but numbers and nulls, from byte counts.
    The body is {"model": M, "input": ...} (checked before), so its strings are two keys and M:
    6 quote bytes when M has no quote or backslash. Numbers, null and the keys' letters hold no
    'r' (true) and no 'f' (false), so more of those than M has means a true/false (or an
    escaped key, or Infinity: then the exact scan runs, which is only slower)."""
    if '"' in model or "\\" in model:
        return False
    rest = body.translate(None, _NOT_COUNTED)  # one C pass over the body; what is left is short
    return rest.count(b'"') == 6 and rest.count(b"r") == model.count("r") and rest.count(b"f") == model.count("f")


def rows_to_matrix(rows: object, max_rows: int, only_numbers: bool) -> np.ndarray | list[list[float | None]]:
    """JSON rows -> float64 [rows, width] (null -> NaN), or the checked lists when the rows differ
    in length; a 400 naming the first bad row or value."""
    if type(rows) is not list:
        raise InvalidInput("input: must be a list of rows, each a list of numbers", "input")
    if not rows:
        raise InvalidInput("'input' must hold at least one row", "input")
    if len(rows) > max_rows:
        raise PayloadTooLarge(f"'input' has {len(rows)} rows; at most {max_rows} per request")
    if not all(type(r) is list for r in rows):
        i = next(i for i, r in enumerate(rows) if type(r) is not list)
        raise InvalidInput(f"input.{i}: must be a list of numbers, got {_kind(rows[i])}", f"input.{i}")
    width = len(rows[0])
    if not all(len(r) == width for r in rows):
        # Ragged: at least one row has the wrong number of features. The rows go on as lists so
        # that the check against the model (to_matrix) names the row and the model's count.
        _check_values(rows)
        return rows
    if only_numbers:
        try:
            x = np.array(rows, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            x = None  # e.g. a nested list: the scan below names it
        if x is not None and x.ndim == 2:
            return x
    _check_values(rows)
    return np.array(rows, dtype=np.float64)


def _check_values(rows: list[list[object]]) -> None:
    for i, r in enumerate(rows):
        for j, v in enumerate(r):
            if type(v) not in _NUMBER:
                raise InvalidInput(f"input.{i}.{j}: must be a number or null, got {_kind(v)}", f"input.{i}.{j}")
            if type(v) is int and abs(v) > 1.7976931348623157e308:  # only the stdlib parser makes such ints
                raise InvalidInput(f"input[{i}][{j}] is out of float range", f"input[{i}][{j}]")


def _kind(v: object) -> str:
    if isinstance(v, str):
        return f"a string ({echo(v)!r})"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, list):
        return "a list"
    return "an object" if isinstance(v, dict) else type(v).__name__


# -- .npy ---------------------------------------------------------------------------------


def query_model(query: Sequence[tuple[str, str]]) -> str:
    """The model of a binary body: exactly one ?model=NAME, and no other parameter."""
    for name, _ in query:
        if name != "model":
            raise InvalidInput(f"unknown query parameter {echo(name)!r}: a binary body takes only ?model=NAME", name)
    models = [value for name, value in query if name == "model"]
    if not models:
        raise InvalidInput("'model' is required: with a binary body, name the predictor in the query "
                           "(?model=NAME)", "model")
    if len(models) > 1:
        raise InvalidInput("'model' is given more than once in the query", "model")
    return models[0]


def parse_npy(body: bytes, query: Sequence[tuple[str, str]], max_rows: int) -> PredictInput:
    """A .npy file -> its 2-D numeric array, without a copy. The header is read first and the
    data length checked against it: np.load would allocate whatever shape a header claims
    before finding the data short, and pickled (object) arrays are refused by their dtype
    before any data is looked at (the same refusal as np.load(allow_pickle=False))."""
    model = query_model(query)
    fp = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise ValueError(f".npy format version {version[0]}.{version[1]} (1.0 and 2.0 are read)")
    except (ValueError, SyntaxError, EOFError) as e:
        raise InvalidInput(f"the body is not a readable .npy file: {echo(e)}") from None
    if dtype.kind not in "fiu" or dtype.itemsize > 8:  # object (pickle), bool, complex, structured...
        raise InvalidInput(f"the .npy array has dtype {echo(dtype)}: send integers or float16/32/64 values")
    if len(shape) != 2:
        raise InvalidInput(f"the .npy array has {len(shape)} dimension(s), shape {list(shape)}: send a 2-D "
                           "[rows, features] matrix")
    if min(shape) < 0:  # numpy's header reader lets (-2, -3) through
        raise InvalidInput(f"the .npy header declares a negative dimension, shape {list(shape)}")
    if shape[0] == 0:
        raise InvalidInput("the .npy array must hold at least one row", "input")
    if shape[0] > max_rows:
        raise PayloadTooLarge(f"the .npy array has {shape[0]} rows; at most {max_rows} per request")
    need, have = shape[0] * shape[1] * dtype.itemsize, len(body) - fp.tell()
    if need != have:
        raise InvalidInput(f"the .npy header declares shape {list(shape)} of {dtype} ({need} bytes of data) "
                           f"but {have} bytes follow it")
    x = np.frombuffer(body, dtype=dtype, count=shape[0] * shape[1], offset=fp.tell())
    return PredictInput(model, x.reshape(shape, order="F" if fortran else "C"))
