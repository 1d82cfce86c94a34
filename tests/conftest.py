from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

# Keep Ray quiet and small on 2-core CI machines.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray's temp dir of our own: the clusters these tests start never meet another Ray on this machine
# (nor its current-cluster file, which raycompile.enable() joins), and vice versa. Short: Ray's
# socket paths have a length limit.
os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rt", dir="/tmp")

CORPUS = pathlib.Path(__file__).parent / "fixtures" / "corpus_torch211" / "kernels"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def corpus() -> pathlib.Path:
    return CORPUS


@pytest.fixture(scope="session")
def corpus_files() -> list[pathlib.Path]:
    return sorted(CORPUS.glob("*.py"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own empty raycompile cache and user key (subprocesses inherit them)."""
    monkeypatch.setenv("RAYCOMPILE_CACHE_DIR", str(tmp_path / "raycompile-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("RAYCOMPILE_SECRET", raising=False)
    monkeypatch.setenv("RAYCOMPILE_HEAD_CACHE_DIR", str(tmp_path / "raycompile-head"))
    monkeypatch.delenv("RAYCOMPILE_SHARED_CACHE", raising=False)
    # the suite exercises the farm through Ray on this one machine, where the default ("auto")
    # would compile in Inductor's own workers; tests of that default pass compile_jobs="auto"
    monkeypatch.setenv("RAYCOMPILE_COMPILE_JOBS", "cluster")


def _start_redis(directory: pathlib.Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real redis-server (Debian's package) on a free port on 127.0.0.1; skips without one."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server for the session, stopped afterwards."""
    proc, url = _start_redis(tmp_path_factory.mktemp("redis"))
    yield url
    _stop(proc)


@pytest.fixture
def redis_server(tmp_path: pathlib.Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A redis-server of the test's own (process, url), so the test can stop it mid-run."""
    proc, url = _start_redis(tmp_path)
    yield proc, url
    _stop(proc)
