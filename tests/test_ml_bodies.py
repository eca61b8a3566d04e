"""/ml/v1/predict bodies (api/antfly/ml_body.py): the orjson JSON fast path and the binary
.npy body give the same predictions as each other, as the in-process evaluator and as the
source library; every bad body is a 400/413/415 in the Antfly envelope naming the problem;
a pickled (object) .npy is refused."""

from __future__ import annotations

import io
import json

import httpx
import joblib
import numpy as np
import pytest

from inferd.cli import main as cli
from inferd.runtimes.tabular import load_file, model_file, predict
from tests.ml_zoo import build_zoo
from tests.server import serve

TOL = 1e-5
NPY = {"content-type": "application/x-npy"}
NUM_FEATURES = 6  # every zoo model


def npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=True)
    return buf.getvalue()


@pytest.fixture(scope="module")
def zoo():
    return {z.name: z for z in build_zoo()}


@pytest.fixture(scope="module")
def ml_dir(zoo, tmp_path_factory):
    src, ml = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("ml")
    for z in zoo.values():
        if z.kind == "sklearn":
            path = src / f"{z.name}.joblib"
            joblib.dump(z.model, path)
        else:
            path = src / (f"{z.name}.json" if z.kind == "xgboost" else f"{z.name}.txt")
            z.model.save_model(str(path))
        assert cli(["ml", "import", str(path), "--name", z.name, "--ml-dir", str(ml)]) == 0, z.name
    return ml


@pytest.fixture(scope="module")
def client(ml_dir):
    with serve(ml_dir=str(ml_dir), max_loaded_models=64) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        yield c


def post_npy(c: httpx.Client, model: str | None, body: bytes, path: str = "/ml/v1/predict", **params):
    if model is not None:
        params["model"] = model
    return c.post(path, content=body, headers=NPY, params=params)


def test_npy_json_evaluator_and_library_agree(client, zoo, ml_dir):
    """Every model, both prefixes: JSON and .npy bodies give the very same floats, equal to the
    evaluator run in-process on the same file and, within float32 rounding, to the library."""
    for z in zoo.values():
        x = z.x_test
        rows = [[None if np.isnan(v) else float(v) for v in r] for r in x]
        by_json = client.post("/ml/v1/predict", json={"model": z.name, "input": rows})
        assert by_json.status_code == 200, (z.name, by_json.text)
        want = predict(load_file(model_file(ml_dir / z.name)), x.astype(np.float32))
        got_json = np.asarray(by_json.json()["predictions"])
        assert np.array_equal(got_json, want), z.name
        assert np.allclose(got_json, z.reference(x), atol=TOL, rtol=0), z.name
        for path in ("/ml/v1/predict", "/ai/v1/predict"):
            for dtype in (np.float32, np.float64):
                r = post_npy(client, z.name, npy(x.astype(dtype)), path)
                assert r.status_code == 200, (z.name, path, r.text)
                body = r.json()
                assert body == {**by_json.json(), "predictions": body["predictions"]}  # model, task alike
                assert np.array_equal(np.asarray(body["predictions"]), want), (z.name, path, dtype)


def test_npy_layouts_and_integer_dtypes(client, zoo):
    z = zoo["rf-multi"]
    x = z.x_test
    want = client.post("/ml/v1/predict", json={"model": z.name, "input": x.tolist()}).json()["predictions"]
    for a in (np.asfortranarray(x), x.astype(">f8"), x.astype(np.float32).astype(">f4")):
        assert post_npy(client, z.name, npy(a)).json()["predictions"] == want
    ints = np.round(x * 3).astype(np.int16)
    want_int = client.post("/ml/v1/predict", json={"model": z.name, "input": ints.tolist()}).json()["predictions"]
    for dtype in (np.int16, np.int64, np.uint8):
        a = np.abs(ints).astype(dtype) if dtype == np.uint8 else ints.astype(dtype)
        ref = client.post("/ml/v1/predict", json={"model": z.name, "input": a.tolist()}).json()["predictions"]
        assert post_npy(client, z.name, npy(a)).json()["predictions"] == ref
    assert post_npy(client, z.name, npy(ints)).json()["predictions"] == want_int
    assert np.allclose(want, z.reference(x), atol=TOL, rtol=0)


def test_npy_nan_is_a_missing_value(client, zoo):
    z = zoo["xgb-nan"]
    x = z.x_test[np.isnan(z.x_test).any(1)]
    assert len(x) > 5
    r = post_npy(client, z.name, npy(x.astype(np.float32)))
    assert np.allclose(np.asarray(r.json()["predictions"]), z.reference(x), atol=TOL, rtol=0)
    r = post_npy(client, "linreg", npy(np.full((2, 6), np.nan)))
    assert r.status_code == 400 and "input[0][0] is missing" in r.json()["message"]


def _with_shape(shape: str, data: bytes) -> bytes:
    """A hand-made version 1.0 .npy file of float64 with the given shape text."""
    header = ("{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % shape).encode()
    header = header.ljust(64 * ((len(header) + 11) // 64 + 1) - 11) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


BAD_NPY = [
    ("object (pickle)", npy(np.array([[1.0, "x", None, 2, 3, 4]], dtype=object)), 400, "dtype object"),
    ("bool", npy(np.ones((2, 6), dtype=bool)), 400, "dtype bool"),
    ("complex", npy(np.ones((2, 6), dtype=np.complex64)), 400, "dtype complex64"),
    ("structured", npy(np.zeros(3, dtype=[("a", "<f4"), ("b", "<f4")])), 400, "dtype"),
    ("1-D", npy(np.ones(6)), 400, "1 dimension(s), shape [6]"),
    ("3-D", npy(np.ones((2, 3, 6))), 400, "3 dimension(s), shape [2, 3, 6]"),
    ("features", npy(np.ones((2, 5))), 400, "input[0] has 5 values; the model takes exactly 6 features"),
    ("no rows", npy(np.ones((0, 6))), 400, "at least one row"),
    ("infinite", npy(np.array([[1, 2, 3, np.inf, 5, 6.0]])), 400, "input[0][3] is infinite"),
    ("float32 range", npy(np.array([[1, 2, 3, 4, 5, 1e39]])), 400, "input[0][5] is out of float32 range"),
    ("truncated", npy(np.ones((4, 6)))[:-8], 400, "declares shape [4, 6] of float64 (192 bytes of data) but 184"),
    ("trailing bytes", npy(np.ones((4, 6))) + b"xx", 400, "but 194 bytes follow"),
    ("huge shape", _with_shape("(1, 1000000000000)", b"\0" * 48), 400,
     "shape [1, 1000000000000] of float64 (8000000000000 bytes"),
    ("negative shape", _with_shape("(-2, -3)", b"\0" * 48), 400, "negative dimension, shape [-2, -3]"),
    ("not npy", b"PK\x03\x04 a zip file, say", 400, "not a readable .npy file"),
    ("bad header", _with_shape("'abc'", b""), 400, "not a readable .npy file"),
    ("rows", npy(np.ones((10_001, 6), dtype=np.float32)), 413, "10001 rows; at most 10000"),
]


@pytest.mark.parametrize("case, body, status, text", BAD_NPY, ids=[c[0] for c in BAD_NPY])
def test_bad_npy_bodies(client, case, body, status, text):
    r = post_npy(client, "rf-bin", body)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["error"] == {400: "INVALID_REQUEST", 413: "PAYLOAD_TOO_LARGE"}[status] and text in err["message"], err


def test_npy_model_comes_from_the_query(client):
    body = npy(np.ones((2, 6)))
    r = post_npy(client, None, body)
    assert r.status_code == 400 and "'model' is required" in r.json()["message"] and "?model=NAME" in r.json()["message"]
    r = post_npy(client, "rf-bin", body, temperature="1")
    assert r.status_code == 400 and "unknown query parameter 'temperature'" in r.json()["message"]
    r = client.post("/ml/v1/predict?model=rf-bin&model=rf-multi", content=body, headers=NPY)
    assert r.status_code == 400 and "more than once" in r.json()["message"]
    r = post_npy(client, "ghost", body)
    assert r.status_code == 404 and r.json()["error"] == "MODEL_NOT_FOUND" and "'ghost'" in r.json()["message"]
    r = client.post("/ml/v1/predict?model=rf-bin", json={"model": "rf-bin", "input": [[1.0] * 6]})
    assert r.status_code == 400 and "query parameter 'model' is for binary bodies" in r.json()["message"]


def test_unsupported_content_type_is_415(client):
    for ctype in ("text/plain", "application/octet-stream", "application/vnd.apache.arrow.stream"):
        r = client.post("/ml/v1/predict?model=rf-bin", content=npy(np.ones((1, 6))), headers={"content-type": ctype})
        assert r.status_code == 415, (ctype, r.text)
        err = r.json()
        assert err["error"] == "UNSUPPORTED_MEDIA_TYPE" and f"'{ctype}'" in err["message"], err
        assert "application/x-npy" in err["message"] and "application/json" in err["message"]
    # A .npy sent as JSON (curl --data-binary without -H) gets a hint.
    for headers in ({"content-type": "application/json"}, {"content-type": "application/x-www-form-urlencoded"}):
        r = client.post("/ml/v1/predict?model=rf-bin", content=npy(np.ones((1, 6))), headers=headers)
        assert r.status_code == 400 and "is a .npy file" in r.json()["message"], r.text
        assert "Content-Type: application/x-npy" in r.json()["message"]


def test_body_limit_is_413_for_npy(ml_dir):
    with serve(ml_dir=str(ml_dir), max_body_bytes=4096) as s:
        r = httpx.post(s.url + "/ml/v1/predict?model=rf-bin", content=npy(np.ones((100, 6))), headers=NPY)
        assert r.status_code == 413 and r.json()["error"] == "PAYLOAD_TOO_LARGE" and "4096" in r.json()["message"]
        r = httpx.post(s.url + "/ml/v1/predict?model=rf-bin", content=npy(np.ones((10, 6))), headers=NPY)
        assert r.status_code == 200 and len(r.json()["predictions"]) == 10


BAD_JSON = [
    ("numeric string", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, "1.5"]]}', "input.0.5: must be a number or null, "
     "got a string ('1.5')"),
    ("true", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 6], [1, true, 3, 4, 5, 6]]}', "input.1.1: must be a number "
     "or null, got a boolean (true)"),
    ("false", '{"model": "rf-bin", "input": [[false, 2, 3, 4, 5, 6]]}', "input.0.0: must be a number or null, got a "
     "boolean (false)"),
    ("nested", '{"model": "rf-bin", "input": [[[1], [2], [3], [4], [5], [6]]]}', "input.0.0: must be a number or null, "
     "got a list"),
    ("object value", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, {}]]}', "input.0.5: must be a number or null, got "
     "an object"),
    ("row not a list", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 6], 7]}', "input.1: must be a list of numbers, "
     "got int"),
    ("input not a list", '{"model": "rf-bin", "input": {"a": 1}}', "input: must be a list of rows"),
    ("extra field", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 6]], "temperature": 1}', "temperature: unknown "
     "field; the body takes only 'model' and 'input'"),
    ("model type", '{"model": 7, "input": [[1, 2, 3, 4, 5, 6]]}', "model: must be a string"),
    ("no input", '{"model": "rf-bin"}', "'input' is required"),
    ("not an object", '[[1, 2, 3, 4, 5, 6]]', "the request body must be a JSON object"),
    ("malformed", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 6]', "malformed JSON body"),
    ("beyond float64", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 1e400]]}', "input[0][5] is infinite"),
    ("huge integer", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 1' + "0" * 400 + ']]}', "input[0][5] is out of "
     "float range"),
    ("ragged", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]]}', "input[1] has 7 values; "
     "the model takes exactly 6 features"),
    ("ragged and a string", '{"model": "rf-bin", "input": [[1, 2, 3, 4, 5, 6], [1, "x"]]}', "input.1.1: must be a "
     "number or null, got a string ('x')"),
]


@pytest.mark.parametrize("case, raw, text", BAD_JSON, ids=[c[0] for c in BAD_JSON])
def test_bad_json_bodies(client, case, raw, text):
    r = client.post("/ai/v1/predict", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "INVALID_REQUEST" and text in r.json()["message"], r.json()


def test_json_variants_that_parse(client, zoo):
    """Pretty-printed bodies, keys in either order, null and NaN for missing values, integers,
    and model names holding the letters the fast path counts ('r', 'f') all give the answer
    of the plain body."""
    z = zoo["xgb-nan"]
    x = z.x_test[:20]
    rows = [[None if np.isnan(v) else float(v) for v in r] for r in x]
    plain = client.post("/ml/v1/predict", json={"model": z.name, "input": rows}).json()
    assert np.allclose(np.asarray(plain["predictions"]), z.reference(x), atol=TOL, rtol=0)
    for raw in (json.dumps({"input": rows, "model": z.name}, indent=2),
                json.dumps({"model": z.name, "input": x.tolist()}),  # NaN literals: the stdlib parser
                '{"model": "xgb-n\\u0061n", "input": %s}' % json.dumps(rows)):
        r = client.post("/ml/v1/predict", content=raw, headers={"content-type": "application/json; charset=utf-8"})
        assert r.status_code == 200 and r.json() == plain, r.text
    ints = [[1, 0, -2, 3, 0, 1]]
    a = client.post("/ml/v1/predict", json={"model": "rf-bin", "input": ints}).json()
    b = post_npy(client, "rf-bin", npy(np.array(ints, dtype=np.float32))).json()
    assert a == b and len(a["predictions"]) == 1


def test_fast_path_byte_counts():
    """The byte counts that let a body skip the per-value scan: true for numbers and nulls
    only, false as soon as a string or a boolean may be in the rows."""
    from inferd.api.antfly.ml_body import _only_numbers

    rows = [[1.5, None, -2e-7, 3], [0, 1, 2, 3]]
    for model in ("rf-bin", "forest", "a-b"):
        assert _only_numbers(json.dumps({"model": model, "input": rows}).encode(), model)
        assert _only_numbers(json.dumps({"input": rows, "model": model}, indent=4).encode(), model)
        for bad in ("1.5", True, False):
            body = json.dumps({"model": model, "input": [[1.0, bad]]}).encode()
            assert not _only_numbers(body, model), (model, bad)
    assert not _only_numbers(json.dumps({"model": 'a"b', "input": rows}).encode(), 'a"b')
