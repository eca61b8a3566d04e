"""The documentation: the docs site builds strictly (no broken link, anchor or nav entry), the
README stays a front page that keeps the two commands (the test one is what .ci/run runs), and
every route the app serves is documented on some page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.api.app import create_app
from inferd.config import load_settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# FastAPI's own pages, not inferd's API.
UNDOCUMENTED_ROUTES = {"/docs", "/docs/oauth2-redirect", "/openapi.json"}


def shell_commands(text: str) -> list[str]:
    """The commands of a shell snippet: continuation lines joined, split at `&&` and line ends."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [" ".join(c.split()) for line in joined.splitlines() for c in line.split("&&") if c.strip()]


def code_block_after(text: str, lead: str) -> str:
    """The first fenced code block after the paragraph that starts with `lead`."""
    m = re.search(re.escape(lead) + r".*?\n```[a-z]*\n(.*?)\n```", text, re.S)
    assert m, f"no code block after {lead!r}"
    return m.group(1)


def ci_commands() -> list[str]:
    """What .ci/run runs after its browser setup: the venv, installs, lint, types and pytest."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return shell_commands("\n".join(x for x in lines if x.startswith(("python3 -m venv", ".venv/bin/"))))


def test_mkdocs_build_strict(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(site)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    # every page in nav was rendered, the configuration page keeps the generated-table markers
    assert (site / "index.html").is_file()
    for page in ("openai", "ollama", "antfly", "llama-server", "configuration", "security", "benchmarks"):
        assert (site / page / "index.html").is_file(), page
    conf = (DOCS / "configuration.md").read_text()
    begin, end = conf.index("<!-- settings:begin -->"), conf.index("<!-- settings:end -->")
    assert begin < end and "| `--host` |" in conf[begin:end]


def test_readme_is_a_front_page_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) < 300
    test_cmd = shell_commands(code_block_after(text, "Install and run the tests"))
    assert test_cmd == ci_commands()
    serve_cmd = shell_commands(code_block_after(text, "Install and serve"))
    assert serve_cmd[-1] == ".venv/bin/inferd serve"
    # the serve install is the CI install without the test extras and pip's -q
    no_deps = [c.replace(" -q", "") for c in ci_commands() if "--no-deps" in c]
    assert serve_cmd[:2] == ci_commands()[:2] and no_deps[0] in serve_cmd
    assert ".venv/bin/pip install -e '.[models]'" in serve_cmd
    # the docs site's home shows the same two commands
    index = (DOCS / "index.md").read_text()
    assert shell_commands(code_block_after(index, "Install and run the tests")) == test_cmd
    assert shell_commands(code_block_after(index, "Install and serve")) == serve_cmd


def test_readme_links_resolve():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert missing == []


def route_pattern(path: str) -> re.Pattern[str]:
    """A route path as it appears in the docs: `{param}` stands for any concrete value (a name,
    an id, `{id}` itself), the path starts after the address or a non-path character and ends
    before one (so `/models` is not found inside `/v1/models` or `/models/load`)."""
    parts = re.split(r"\{[^}]+\}", path)
    body = r"[^\s`'\"()<>|,]+".join(re.escape(p) for p in parts)
    return re.compile(r"(?:(?<=:8080)|(?<![\w/.:-]))" + body + r"(?![\w/-])")


@pytest.fixture(scope="module")
def app_paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("docs-app")
    settings = load_settings({"models_dir": str(d / "models"), "ml_dir": str(d / "ml"), "data_dir": str(d / "data"),
                              "builtins": False})
    app = create_app(settings)
    try:  # FastAPI >= 0.165 keeps included routers as branches; this walks them
        from fastapi.routing import iter_route_contexts
        paths = {c.path for c in iter_route_contexts(app.routes) if c.path}
    except ImportError:  # older FastAPI copies every included route into app.routes
        paths = {r.path for r in app.routes if hasattr(r, "path")}
    return sorted(paths - UNDOCUMENTED_ROUTES)


def test_route_pattern():
    assert route_pattern("/models").search("curl http://127.0.0.1:8080/models  # x")
    assert not route_pattern("/models").search("`/v1/models` and `/models/load`")
    assert route_pattern("/v1/files/{file_id}/content").search("curl http://127.0.0.1:8080/v1/files/file-9591/content -o x")
    assert route_pattern("/slots/{id_slot}").search("'http://127.0.0.1:8080/slots/0?action=save'")


def test_every_route_is_documented(app_paths):
    assert "/v1/chat/completions" in app_paths and len(app_paths) > 60
    text = "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")))
    undocumented = [p for p in app_paths if not route_pattern(p).search(text)]
    assert undocumented == []
