from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

# Tests never reach a model hub; make libraries that try fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for var in [k for k in os.environ if k.startswith("INFERD_")]:
    del os.environ[var]  # a developer's own settings must not leak into tests


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
