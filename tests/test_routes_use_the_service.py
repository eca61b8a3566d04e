"""Issue 10's rule for the web layer, on the routes of the console/observability and
extraction issues: they go through the service facade (one entry point resolves a model
name for every route); none reaches into the registry. (Other faces' routes are being
regrouped; they join this list then.)"""

from __future__ import annotations

import re
from pathlib import Path

API = Path(__file__).parent.parent / "inferd" / "api"
FILES = ["observe.py", "console.py", "control.py", "antfly/extract.py"]
REACH = re.compile(r"\b(?:svc|service|self)\.registry\.\w+")


def reaches(text: str) -> list[str]:
    return REACH.findall(text)


def test_no_route_touches_the_registry():
    found = {f: reaches((API / f).read_text()) for f in FILES}
    assert {k: v for k, v in found.items() if v} == {}


# The facade's parts: a route reaching one of them (or building a store of its own) skips the
# facade's methods (issue 28: speech, model management, /v1/files went through it directly).
PARTS = re.compile(r"\b(?:svc|service)\.(?:registry|speech|models_mgr|rewriting|extraction|encoders|reading|"
                   r"images|tabular|chunking|generation|lora|catalog|media)\.\w+|\bFileStore\b")


def test_no_route_reaches_past_the_facade():
    found = {str(f.relative_to(API)): PARTS.findall(f.read_text()) for f in sorted(API.rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_check_can_fail():
    assert PARTS.findall("await svc.speech.open(req)\nst.files = FileStore.for_data_dir(d)") == [
        "svc.speech.open", "FileStore"]
    text = "svc.registry.resolve(model)\nfrom inferd.registry.registry import Registry"
    assert reaches(text) == ["svc.registry.resolve"]
