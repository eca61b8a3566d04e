"""The layering docs/architecture.md promises, checked on the source. Every import counts, wherever it is:
at module level, inside a function (a lazy import is still a dependency), or under
TYPE_CHECKING (a type is a dependency too).

- each "never" of docs/architecture.md's layer rules ("Imports point down only"; runtimes are leaves;
  schedulers drive runtimes through Protocols; the API is HTTP only and reaches models through the service; chat is protocol-free; the
  shared base imports nothing above it), as the table RULES below;
- nothing below api/ imports the web framework;
- the kinds table (inferd/kinds) is cheap to read from the registry: at module level it imports
  only the neutral base (runtimes, schedulers and handles only inside its loaders);
- inferd/ has no import cycle: the module graph (function-level imports included, and importing
  a.b.c runs a/__init__ and a/b/__init__ too) has no strongly connected component."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "inferd"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_in(tree: ast.AST, path: Path) -> set[str]:
    """Every inferd module (or module.name) that the code in `tree`, from file `path`, imports."""
    found: set[str] = set()
    pkg = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("inferd"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                mod = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("inferd"):
                found.add(mod)
                found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def imports(path: Path) -> set[str]:
    """Imports at any depth (function-level and TYPE_CHECKING imports count too)."""
    return imports_in(ast.parse(path.read_text()), path)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def resolve(name: str) -> str | None:
    """The module an imported name lives in ("inferd.kinds.KINDS" -> "inferd.kinds")."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def deps_of(name: str) -> set[str]:
    """The inferd modules `name` imports, anywhere in its file."""
    return {d for d in (resolve(i) for i in imports(MODULES[name])) if d and d != name}


# ---- docs/architecture.md's layer rules -----------------------------------------------------------------
# The shared base: engine dataclasses, ModelKind/ModelSpec, domain errors, per-domain engine types,
# the settings' defaults that lower layers share.
BASE = ("inferd.defaults", "inferd.types", "inferd.errors", "inferd.models", "inferd.extraction_types", "inferd.speech_types")


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# layer -> ("only", allowed) or ("never", forbidden): what modules of that layer may import.
RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    # "Nothing in runtimes/ imports service, registry, scheduling or api": runtimes are leaves,
    # and import nothing above the base at all (not chat, config or the kinds table either:
    # what a runtime needs, such as a built-in chat template, is passed in by its loader).
    "inferd.runtimes": ("only", ("inferd.runtimes", *BASE)),
    # the shared base imports nothing above it
    **{b: ("only", BASE) for b in BASE},
    # chat/ is protocol-free: templates, tool calls, grammars over text and the base
    "inferd.chat": ("only", ("inferd.chat", "inferd.text", *BASE)),
    "inferd.text": ("only", ("inferd.text", *BASE)),
    # api/ is HTTP only: a route converts and calls a service verb, never a runtime, the
    # registry or a scheduler directly
    "inferd.api": ("never", ("inferd.runtimes", "inferd.registry", "inferd.scheduling")),
    # down only, and no runtime either: a scheduler states what it drives as Protocols
    # (seq2seq.Decoding, jobs.Backend, ...) and the kind's loader passes the runtime in
    "inferd.scheduling": ("never", ("inferd.runtimes", "inferd.service", "inferd.registry", "inferd.api", "inferd.kinds",
                                    "inferd.cli", "inferd.config", "inferd.cluster")),
    # the registry discovers and loads through the kinds table: it imports no runtime, no
    # scheduler and nothing above it
    "inferd.registry": ("never", ("inferd.runtimes", "inferd.scheduling", "inferd.service", "inferd.api",
                                  "inferd.cli", "inferd.cluster")),
    "inferd.service": ("never", ("inferd.api", "inferd.cli", "inferd.cluster")),
}



def violations(name: str, deps: set[str]) -> list[str]:
    out = []
    for layer, (how, targets) in RULES.items():
        if not _under(name, (layer,)):
            continue
        for d in sorted(deps):
            bad = not _under(d, targets) if how == "only" else _under(d, targets)
            if bad:
                out.append(f"{name} imports {d} ({layer}: {how} {', '.join(targets)})")
    return out


def test_every_layer_rule_holds():
    bad = [v for name in sorted(MODULES) for v in violations(name, deps_of(name))]
    assert not bad, "\n".join(bad)


def test_the_layer_check_can_fail():
    assert violations("inferd.runtimes.onnx", {"inferd.service.handles"})
    assert violations("inferd.runtimes.llama_cpp.generator", {"inferd.chat.templates"})
    assert violations("inferd.api.ollama.manage", {"inferd.registry.pull.names"})
    assert violations("inferd.chat.tools", {"inferd.api.errors"})
    assert violations("inferd.types", {"inferd.chat.tools"})
    assert violations("inferd.scheduling.batcher", {"inferd.registry.registry"})
    assert not violations("inferd.api.openai.routes", {"inferd.service", "inferd.kinds", "inferd.types"})
    assert violations("inferd.scheduling.seq2seq", {"inferd.runtimes.seq2seq.decoding"})  # Protocols instead


def test_the_rules_cover_design_md():
    """docs/architecture.md's "Nothing in runtimes/ imports service, registry, scheduling or api"."""
    for above in ("inferd.service", "inferd.registry", "inferd.scheduling", "inferd.api"):
        assert violations("inferd.runtimes.x", {above + ".y"}), above


def module_level_imports(path: Path) -> set[str]:
    """Imports run when the module is imported: not those in functions or under TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= imports_in(node, path)
    return found


def test_the_kinds_table_imports_only_the_base_at_module_level():
    """The registry reads the table at discovery: importing it must not import a runtime, a
    scheduler, the service or the registry (which would also be a cycle)."""
    base = ("inferd.models", "inferd.errors", "inferd.kinds")
    kinds = {n: p for n, p in MODULES.items() if n == "inferd.kinds" or n.startswith("inferd.kinds.")}
    assert len(kinds) >= 12  # the package, spec.py and one module per kind
    bad = [f"{name} imports {imp} at module level" for name, path in kinds.items()
           for imp in module_level_imports(path) if not imp.startswith(base)]
    assert not bad, "\n".join(bad)


def test_nothing_below_api_imports_the_web_framework():
    bad = []
    for name, path in MODULES.items():
        if name.startswith(("inferd.api", "inferd.cli")) or name == "inferd.cluster":
            continue
        text = path.read_text()
        for lib in ("fastapi", "starlette"):
            if f"import {lib}" in text or f"from {lib}" in text:
                bad.append(f"{name} imports {lib}")
    assert not bad, "\n".join(bad)


# ---- no import cycle -------------------------------------------------------------------------
def ancestors(name: str) -> set[str]:
    """The packages importing `name` runs first ("a.b.c" -> a, a.b)."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))} & set(MODULES)


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        deps = deps_of(name)
        deps |= {a for d in deps for a in ancestors(d)} | ancestors(name)
        # A package importing its own submodules (re-exports, lazy loaders) is not a cycle of
        # design: the submodule's edge back to its package is the import system's, not ours.
        graph[name] = {d for d in deps if d != name and not d.startswith(name + ".")}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next((w for w in edges if w in graph), None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle_among_inferd_modules():
    cycles = [c for c in strongly_connected(import_graph()) ]
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_can_fail():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_a_package_level_cycle_is_seen():
    """spacy importing extract.common runs extract/__init__, which (in a function) imported
    spacy: a cycle through the package, as runtimes/extract and runtimes/spacy once were."""
    assert ancestors("inferd.runtimes.common.spans") == {"inferd", "inferd.runtimes", "inferd.runtimes.common"}
    graph = {"x": {"y"}, "x.common": {"x"}, "y": {"x.common", "x"}}
    assert strongly_connected(graph) == [["x", "x.common", "y"]]
