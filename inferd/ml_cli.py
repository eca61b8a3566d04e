"""`inferd ml import MODEL_FILE --name NAME [--ml-dir DIR] [--force]`: the command line of the
tabular importers (runtimes/tabular/importers). Here, beside cli.py, not in the runtime: it
reads the server's settings for the default ml-dir, and runtimes import nothing above them."""

from __future__ import annotations

import argparse
import sys


def cmd_import(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from inferd.errors import ConfigError
    from inferd.runtimes.tabular.importers import UnsupportedModel, import_file, write_predictor
    from inferd.runtimes.tabular.ir import IRError, parse, summary

    try:
        if ns.ml_dir is None:
            from inferd.config import load_settings

            ml_dir = load_settings({}, ns.config).ml_dir
        else:
            ml_dir = Path(ns.ml_dir)
        doc = import_file(Path(ns.model_file), ns.name)
        target = write_predictor(doc, ml_dir, ns.name, force=ns.force)
    except ImportError as e:
        print(f"inferd ml import: {e}; install the ML extras: pip install 'inferd[ml]'", file=sys.stderr)
        return 1
    except (UnsupportedModel, IRError, ConfigError, ValueError, OSError) as e:
        print(f"inferd ml import: {e}", file=sys.stderr)
        return 1
    info = summary(parse(doc))
    print(f"imported {ns.name}: {info['source_framework']} {info['model_type']}, task {info['task']}, "
          f"{info['num_features']} features -> {info['num_outputs']} outputs ({', '.join(info['outputs'][:5])})")
    print(f"wrote {target}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    ml = sub.add_parser("ml", help="tabular predictors (/ml/v1)")
    ml_sub = ml.add_subparsers(dest="ml_command", required=True)
    imp = ml_sub.add_parser("import", help="convert a scikit-learn / XGBoost / LightGBM model into a predictor")
    imp.add_argument("model_file", metavar="MODEL_FILE",
                     help="pickle/joblib (scikit-learn), XGBoost .json/.ubj, or LightGBM text model")
    imp.add_argument("--name", required=True, help="predictor name: [A-Za-z0-9_-], at most 128 characters")
    imp.add_argument("--ml-dir", help="predictors folder (default: the server's, ~/.inferd/ml)")
    imp.add_argument("--config", help="TOML or JSON config file to read ml-dir from")
    imp.add_argument("--force", action="store_true", help="replace an existing predictor of that name")
    imp.set_defaults(func=cmd_import)
