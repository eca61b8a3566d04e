"""`inferd ml import MODEL_FILE --name NAME [--ml-dir DIR] [--force]`: the command line of the
tabular importers (runtimes/tabular/importers). Here, beside cli.py, not in the runtime: it
reads the server's settings for the default ml-dir, and runtimes import nothing above them."""

from __future__ import annotations

import argparse
import sys

from inferd.cli_api import Command, settings_from
from inferd.config import ML


def cmd_import(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from inferd.errors import ConfigError
    from inferd.runtimes.tabular.importers import UnsupportedModel, import_file, write_predictor
    from inferd.runtimes.tabular.ir import IRError, parse, summary

    try:
        ml_dir = settings_from(ns).ml_dir  # --ml-dir, else INFERD_ML_DIR, the --config file, the default
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


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_file", metavar="MODEL_FILE",
                   help="pickle/joblib (scikit-learn), XGBoost .json/.ubj, or LightGBM text model")
    p.add_argument("--name", required=True, help="predictor name: [A-Za-z0-9_-], at most 128 characters")
    p.add_argument("--force", action="store_true", help="replace an existing predictor of that name")


COMMANDS = (Command("ml", "tabular predictors (/ml/v1)", verb_dest="ml_command", subcommands=(
    Command("import", "convert a scikit-learn / XGBoost / LightGBM model into a predictor", run=cmd_import,
            add_arguments=_arguments, scopes=(ML,)),)),)
