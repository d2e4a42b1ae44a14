from __future__ import annotations

import ctypes
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from autodiscovery import campaign as campaigns  # noqa: E402
from autodiscovery.store import Store  # noqa: E402


def _has_gpu() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()
HAS_NVCC = shutil.which("nvcc") is not None
if not HAS_GPU:  # no child is started ahead of its job where no GPU waits for it (tests/test_child.py tests them)
    os.environ.setdefault("AUTODISCOVERY_SPARES", "0")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)
    # The longest tests first (in their order otherwise), so that the workers of `-n auto` end together
    # rather than one running a long test alone at the end.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory) -> Path:
    """Where GPU tests keep cubins: $AUTODISCOVERY_TEST_CACHE (builds made ahead, elsewhere) or a fresh folder.
    Builds are keyed by source, compiler, flags and target, so a shared cache never serves a wrong cubin."""
    shared = os.environ.get("AUTODISCOVERY_TEST_CACHE")
    return Path(shared) if shared else tmp_path_factory.mktemp("cubins")


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "runs.db")


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server for the session (tests/pg.py); CI must have one, elsewhere it may be missing."""
    import pg

    why = pg.available()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL: {why}")
        pytest.skip(why)
    server = pg.Server().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """A new, empty database: a SQLite file, and a database on the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return request.getfixturevalue("pg_server").database()


@pytest.fixture
def campaign():
    return campaigns.load("hopper-gemm", ["budget.candidates=10", "stop.patience=50", "stop.target=5", "agent.search.batch=3"])
