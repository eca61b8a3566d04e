"""Issue 10's rule for the web layer: routes go through the service facade (one entry point
resolves a model name for every route); none reaches into the registry."""

from __future__ import annotations

import re
from pathlib import Path

API = Path(__file__).parent.parent / "inferd" / "api"
REACH = re.compile(r"\.registry\.(?!spec\b)\w+")


def reaches(text: str) -> list[str]:
    return REACH.findall(text)


def test_no_route_touches_the_registry():
    found = {str(p.relative_to(API)): reaches(p.read_text()) for p in API.rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_check_can_fail():
    assert reaches("svc.registry.resolve(model)\nfrom inferd.registry.spec import ModelKind") == [".registry.resolve"]
