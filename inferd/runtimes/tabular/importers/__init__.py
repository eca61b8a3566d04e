"""Importers: a model file from scikit-learn, XGBoost or LightGBM -> IR document.

  *.pkl / *.pickle / *.joblib  a pickled scikit-learn estimator or Pipeline (or an
                               XGBoost / LightGBM scikit-learn wrapper or Booster)
  *.json                       an XGBoost JSON model (or an IR file, copied after checking)
  *.ubj                        an XGBoost binary JSON model (needs xgboost)
  *.txt / other text           a LightGBM text model

Every document is validated with ir.parse before it is written, so an import never leaves
a predictor that the server would refuse. Unpickling runs code from the file: import only
files you trust.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from inferd.runtimes.tabular.importers.common import UnsupportedModel
from inferd.models import TABULAR_FILE
from inferd.runtimes.tabular.ir import parse

PICKLE_SUFFIXES = {".pkl", ".pickle", ".joblib", ".jl", ".sav"}

__all__ = ["UnsupportedModel", "convert_object", "import_file", "write_predictor"]


def _unpickle(path: Path) -> Any:
    try:
        import joblib
    except ImportError:
        joblib = None
    if joblib is not None:
        return joblib.load(path)
    with path.open("rb") as f:
        return pickle.load(f)


def convert_object(obj: Any, name: str) -> dict[str, Any]:
    """A fitted in-memory model -> IR document."""
    from inferd.runtimes.tabular.importers import lightgbm as lgb_imp
    from inferd.runtimes.tabular.importers import sklearn as sk_imp
    from inferd.runtimes.tabular.importers import xgboost as xgb_imp

    module = type(obj).__module__
    if module.startswith("xgboost"):
        booster = obj.get_booster() if hasattr(obj, "get_booster") else obj
        return xgb_imp.convert(json.loads(booster.save_raw(raw_format="json")), name)
    if module.startswith("lightgbm"):
        booster = obj.booster_ if hasattr(obj, "booster_") else obj
        return lgb_imp.convert(booster.model_to_string(), name)
    if sk_imp.is_sklearn(obj):
        return sk_imp.convert(obj, name)
    raise UnsupportedModel(f"don't know how to import a {module}.{type(obj).__name__}")


def import_file(path: Path, name: str) -> dict[str, Any]:
    """Read a model file and convert it. Raises UnsupportedModel / ValueError / OSError."""
    from inferd.runtimes.tabular.importers import lightgbm as lgb_imp
    from inferd.runtimes.tabular.importers import xgboost as xgb_imp

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        return convert_object(_unpickle(path), name)
    if suffix == ".ubj":
        return xgb_imp.convert(xgb_imp.load_json(path), name)
    text = path.read_text(encoding="utf-8", errors="replace")
    if suffix == ".json" or text.lstrip().startswith("{"):
        doc = json.loads(text)
        if xgb_imp.looks_like_xgboost(doc):
            return xgb_imp.convert(doc, name)
        if isinstance(doc, dict) and "schema_version" in doc:
            return doc  # already IR: validated by write_predictor
        raise UnsupportedModel(f"{path.name}: a JSON file that is neither an XGBoost model nor a tabular IR")
    if lgb_imp.looks_like_lightgbm(text):
        return lgb_imp.convert(text, name)
    raise UnsupportedModel(f"{path.name}: unknown model format (expected a pickle/joblib file, an XGBoost "
                           ".json/.ubj model or a LightGBM text model)")


def write_predictor(doc: dict[str, Any], ml_dir: Path, name: str, force: bool = False) -> Path:
    """Validate `doc` and write <ml_dir>/<name>/tabular_model.json. Returns the file path."""
    from inferd.models import PREDICTOR_NAME

    if not PREDICTOR_NAME.match(name):
        raise ValueError(f"invalid predictor name {name!r}: use [A-Za-z0-9_-], at most 128 characters")
    doc.setdefault("metadata", {})["name"] = name
    parse(doc)  # raises IRError if the converter produced something the server would refuse
    folder = Path(ml_dir).expanduser() / name
    target = folder / TABULAR_FILE
    if target.exists() and not force:
        raise FileExistsError(f"{target} exists; pass --force to replace it")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    tmp.replace(target)  # never leave a half-written model for a running server to find
    return target
