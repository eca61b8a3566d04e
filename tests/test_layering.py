"""The layering DESIGN.md promises, checked on the source: runtimes are leaves (they import
nothing from service, registry, scheduling, api or the kinds table), schedulers import no
runtime (they drive them through Protocols) and nothing above them, nothing below api/
imports the web framework, the kinds table (inferd/kinds) is cheap to read from the registry
(at module level it imports only the neutral base; runtimes, schedulers and handles only
inside its loaders), and inferd/ has no import cycle among its modules."""

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
    """Imports at any depth (function-level imports count too)."""
    return imports_in(ast.parse(path.read_text()), path)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_runtimes_are_leaves():
    bad = []
    for name, path in MODULES.items():
        if not name.startswith("inferd.runtimes"):
            continue
        for imp in imports(path):
            if imp.startswith(("inferd.service", "inferd.registry", "inferd.scheduling", "inferd.api",
                               "inferd.kinds")):
                bad.append(f"{name} imports {imp}")
    assert not bad, "\n".join(bad)


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


def test_schedulers_and_the_base_do_not_import_the_kinds_table():
    bad = []
    for name, path in MODULES.items():
        if name.startswith(("inferd.scheduling", "inferd.models", "inferd.errors", "inferd.types", "inferd.text",
                            "inferd.chat")):
            bad += [f"{name} imports {imp}" for imp in imports(path) if imp.startswith("inferd.kinds")]
    assert not bad, "\n".join(bad)


SCHEDULING_MAY_NOT_IMPORT = ("inferd.runtimes", "inferd.service", "inferd.registry", "inferd.api", "inferd.kinds")


def forbidden_imports(name: str, found: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return [f"{name} imports {imp}" for imp in sorted(found) if imp.startswith(prefixes)]


def test_schedulers_reach_no_runtime_and_nothing_above_them():
    """scheduling/ states what it drives as Protocols (seq2seq.Decoding, jobs.Backend, ...) and
    the loaders in kinds/ pass the runtime in: a scheduler imports no runtime, at any depth
    (function-level and TYPE_CHECKING imports count), and nothing from the layers above it."""
    sched = {n: p for n, p in MODULES.items() if n.startswith("inferd.scheduling")}
    assert "inferd.scheduling.seq2seq" in sched and "inferd.scheduling.work_queue" in sched
    bad = [line for name, path in sched.items()
           for line in forbidden_imports(name, imports(path), SCHEDULING_MAY_NOT_IMPORT)]
    assert not bad, "\n".join(bad)


def test_the_scheduler_import_check_can_fail():
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from inferd.runtimes.seq2seq.decoding import DecodeParams\n"
    path = ROOT / "scheduling" / "example.py"
    found = imports_in(ast.parse(src), path)
    assert forbidden_imports("x", found, SCHEDULING_MAY_NOT_IMPORT) == [
        "x imports inferd.runtimes.seq2seq.decoding", "x imports inferd.runtimes.seq2seq.decoding.DecodeParams"]


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


def test_no_import_cycles_among_module_level_imports():
    """Module-level imports only: a function-level import is a deliberate lazy edge."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        deps: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(d for d in (resolve(i) for i in imports_in(node, path)) if d and d != name)
        graph[name] = deps
    # A package importing its own submodules (re-exports) is not a cycle of design.
    for name in graph:
        graph[name] = {d for d in graph[name] if not d.startswith(name + ".")}
    cycles = find_cycles(graph)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return cycles


def test_the_cycle_finder_can_fail():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
