"""Find models on disk: the Antfly layout under models_dir, predictors under ml_dir, and
`--model [kind:]NAME=PATH` entries. Pure file inspection: nothing is loaded here. What makes
a folder a model of some kind, and what its files say, is each kind's rule in the kinds
table (inferd/kinds); this module walks the folders and applies them."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from inferd.errors import ConfigError
from inferd.kinds import (FALLBACK, KINDS, AmbiguousKind, kind_dirs, kind_of_architecture, kind_of_format,
                          parse_kind)
from inferd.kinds.spec import architectures, declared
from inferd.models import MANIFEST, PREDICTOR_NAME, TABULAR_FILE, ModelKind, ModelSpec, model_ggufs, onnx_files

log = logging.getLogger("inferd.registry")

_MAX_DEPTH = 4  # org/name/variant is as deep as served names go in practice


@dataclass
class Discovery:
    specs: list[ModelSpec] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # shown at start and by `inferd models`


def read_manifest(folder: Path) -> dict[str, Any]:
    p = folder / MANIFEST
    if not p.is_file():
        return {}
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"{p}: invalid JSON ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{p}: must be a JSON object")
    return data


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in path.rglob("*") if p.is_file()]


def detect_format(path: Path) -> str | None:
    if path.is_file():
        return {".gguf": "gguf", ".onnx": "onnx"}.get(path.suffix) or (
            "tabular" if path.name == TABULAR_FILE else None)
    names = {p.name for p in path.iterdir()}
    if TABULAR_FILE in names:
        return "tabular"
    if model_ggufs(path):
        return "gguf"
    if onnx_files(path):
        return "onnx"
    if {"model.bin", "config.json"} <= names:
        return "ctranslate2"
    if {"meta.json", "config.cfg"} <= names:
        return "spacy"
    if "model.safetensors" in names and "config.json" in names:
        return "safetensors"
    return None


def infer_kind(path: Path, fmt: str, manifest: dict[str, Any]) -> ModelKind:
    """Kind of a model given by path alone (for --model NAME=PATH without a kind: prefix):
    the manifest's `type`, else the kind its format makes, else its config.json architecture,
    else an embedder (the kinds table, inferd/kinds)."""
    if manifest.get("type"):
        kind = parse_kind(str(manifest["type"]))
        if kind is None:
            raise ValueError(f"{path}: unknown model type {manifest['type']!r} in {MANIFEST}")
        return kind
    by_format = kind_of_format(fmt)
    if by_format is not None:
        return by_format
    try:
        by_arch = kind_of_architecture(" ".join(architectures(path)) if path.is_dir() else "")
    except AmbiguousKind as e:
        raise ValueError(f"{path}: {e}; say which with kind:NAME=PATH or a model_manifest.json 'type'") from e
    return by_arch or FALLBACK


def infer_capabilities(kind: ModelKind, fmt: str, path: Path, manifest: dict[str, Any]) -> frozenset[str]:
    """The manifest's capabilities plus what the kind's rule reads from the files."""
    rule = KINDS[kind].capabilities
    return frozenset(declared(manifest) | (rule(fmt, path, manifest) if rule else set()))


def make_spec(name: str, path: Path, source: str, kind: ModelKind | None = None) -> ModelSpec:
    """Inspect one model folder or file. Raises ValueError with a clear message."""
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    manifest = read_manifest(path) if path.is_dir() else {}
    fmt = manifest.get("format") or detect_format(path)
    if fmt is None and kind is not None and path.is_dir() and (path / "config.json").is_file():
        fmt = KINDS[kind].unreadable_format  # e.g. a Florence-2 reader: listed, and refused with its reason
    if fmt is None:
        raise ValueError(f"{path}: no model files found (.gguf, .onnx, tabular_model.json, "
                         "CTranslate2 model.bin, spaCy pipeline)")
    kind = kind or infer_kind(path, fmt, manifest)
    describe = KINDS[kind].describe  # what the files say: a projector, a reader family, an architecture
    if describe is not None:
        manifest = describe(path, manifest)
    served = str(manifest.get("name") or name)
    size = sum(p.stat().st_size for p in _files(path))
    return ModelSpec(name=served, kind=kind, format=str(fmt), path=path, source=source, size_bytes=size,
                     capabilities=infer_capabilities(kind, fmt, path, manifest), manifest=manifest)


def _is_model_dir(d: Path) -> bool:
    return (d / MANIFEST).is_file() or detect_format(d) is not None


def served_specs(spec: ModelSpec) -> list[ModelSpec]:
    """The names one model folder is served under (its kind's variants rule: an embedder with a
    float and an int8 graph is `<name>` and `<name>-i8`)."""
    expand = KINDS[spec.kind].variants
    return expand(spec) if expand is not None else [spec]


def _walk(kind: ModelKind, root: Path, d: Path, depth: int, out: Discovery) -> None:
    for child in sorted(d.iterdir()):
        if child.name.startswith("."):
            continue
        rel = child.relative_to(root).as_posix()
        try:
            if child.is_file() and child.suffix == ".gguf" and not child.name.startswith("mmproj"):
                out.specs.append(make_spec(rel[: -len(".gguf")], child, "models_dir", kind))
            elif child.is_dir() and _is_model_dir(child):
                out.specs += served_specs(make_spec(rel, child, "models_dir", kind))
            elif child.is_dir() and depth < _MAX_DEPTH:
                _walk(kind, root, child, depth + 1, out)
        except (ValueError, OSError) as e:
            out.problems.append(f"skipped {child}: {e}")


def scan_models_dir(models_dir: Path, out: Discovery) -> None:
    if not models_dir.is_dir():
        return
    found = Discovery()
    for dirname, kind in kind_dirs().items():
        if (models_dir / dirname).is_dir():
            _walk(kind, models_dir / dirname, models_dir / dirname, 1, found)
    # A folder of its own wins over another folder's variant of the same name (foo-i8/ beside foo/).
    own = {s.name for s in found.specs if "variant_of" not in s.manifest}
    for s in found.specs:
        if "variant_of" in s.manifest and s.name in own:
            found.problems.append(f"not serving {s.path}'s int8 graph as {s.name!r}: a model folder has that name")
        else:
            out.specs.append(s)
    out.problems += found.problems


# Checks a predictor file at discovery and returns its catalog summary; raises ValueError if it
# is invalid. The composition root passes the tabular runtime's checker (the registry imports
# no runtime).
PredictorCheck = Callable[[Path], dict[str, Any]]


def scan_ml_dir(ml_dir: Path, out: Discovery, check: PredictorCheck | None = None) -> None:
    if not ml_dir.is_dir():
        return
    for child in sorted(ml_dir.iterdir()):
        if not child.is_dir() or child.name.startswith("."):
            continue
        if not (child / TABULAR_FILE).is_file():
            out.problems.append(f"skipped {child}: no {TABULAR_FILE}")
        elif not PREDICTOR_NAME.match(child.name):
            out.problems.append(f"skipped {child}: predictor names are [A-Za-z0-9_-], at most 128 characters")
        else:
            try:  # a broken folder is reported and skipped; the other predictors are served
                spec = make_spec(child.name, child, "ml_dir", ModelKind.PREDICTOR)
            except (ValueError, OSError) as e:  # e.g. a model_manifest.json that is not JSON
                out.problems.append(f"skipped {child}: {e}")
                continue
            if check is not None:
                try:
                    info = check(child / TABULAR_FILE)
                except ValueError as e:
                    out.problems.append(f"skipped {child}: invalid {TABULAR_FILE}: {e}")
                    continue
                spec = dataclasses.replace(spec, manifest={**spec.manifest, "tabular": info})
            out.specs.append(spec)


def parse_model_arg(arg: str) -> tuple[ModelKind | None, str, Path]:
    """`[kind:]NAME=PATH` -> (kind, name, path). NAME may itself contain ':' (llama3:8b)."""
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"--model {arg!r}: expected [kind:]NAME=PATH")
    kind = None
    head, colon, rest = name.partition(":")
    if colon and parse_kind(head):
        kind, name = parse_kind(head), rest
    return kind, name, Path(path).expanduser()


def discover(models_dir: Path, ml_dir: Path, model_args: list[str],
             check_predictor: PredictorCheck | None = None, mmproj: list[str] | None = None) -> Discovery:
    """`mmproj`: projector files for the hand-registered generators, in their order."""
    out = Discovery()
    scan_models_dir(models_dir, out)
    scan_ml_dir(ml_dir, out, check_predictor)
    projectors = [Path(p).expanduser() for p in mmproj or []]
    for arg in model_args:
        kind, name, path = parse_model_arg(arg)
        try:
            spec = make_spec(name, path, "cli", kind)
        except ValueError as e:  # a model asked for by hand that is unusable is a start-up error
            raise ConfigError(f"--model {arg}: {e}") from e
        if spec.kind is ModelKind.GENERATOR and projectors:
            proj = projectors.pop(0)
            if not proj.is_file():
                raise ConfigError(f"--mmproj {proj}: no such file")
            spec = dataclasses.replace(spec, manifest={**spec.manifest, "mmproj": str(proj.resolve())},
                                       capabilities=spec.capabilities | {"vision"})
        out.specs += served_specs(spec)  # the kind's variants, as for a models_dir folder: `<name>-i8`
    # A model of its own (a folder, a --model) keeps its name over another's variant of that name.
    own = {s.name for s in out.specs if "variant_of" not in s.manifest}
    for s in [s for s in out.specs if "variant_of" in s.manifest and s.name in own]:
        out.specs.remove(s)
        out.problems.append(f"not serving {s.path}'s int8 graph as {s.name!r}: a model has that name")
    if projectors:
        raise ConfigError(f"--mmproj {projectors[0]}: no hand-registered generator (--model) left to pair it with")
    for p in out.problems:
        log.warning(p)
    return out
