from __future__ import annotations

import os
import pathlib
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

# Keep Ray quiet and small on 2-core CI machines.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Ray's defaults, as users have them: RAY_AUTH_MODE unset, and a token, as on any machine where a
# ray.init() that started a Ray ran once (Ray 2.60 writes ~/.ray/auth_token then). So `ray start
# --head` starts clusters with token authentication on, an embedded Ray turns it on too, and a
# driver joins as ray.init() would (tests/integration/raystart.py). The token is the suite's own
# (RAY_AUTH_TOKEN_PATH, where Ray looks before ~/.ray/auth_token): the suite neither depends on the
# user's token nor writes one, and runs the same whether or not the machine has one.
# Ray's "(raylet)" prefixes in plain text: captured output and subprocesses' pipes are no terminal
os.environ.setdefault("RAY_COLOR_PREFIX", "0")
# Ray's temp dir of our own: the clusters these tests start never meet another Ray on this machine
# (nor its current-cluster file, which raycompile.enable() joins), and vice versa. Short: Ray's
# socket paths have a length limit.
os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rt", dir="/tmp")
if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
    _token = os.path.join(os.environ["RAY_TMPDIR"], "auth_token")  # beside the sessions' Ray dir, not in it
    with open(_token, "w") as _f:  # as `ray get-auth-token --generate` makes one (authentication_token_generator.py)
        _f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = _token

CORPUS = pathlib.Path(__file__).parent / "fixtures" / "corpus_torch211" / "kernels"
# a real TORCHINDUCTOR_CACHE_DIR's Python files after a CUDA training step: 2 output modules (fwd,
# bwd) next to the 7 kernel modules they load (tests/fixtures/capture_output_modules.py)
INDUCTOR_CACHE = pathlib.Path(__file__).parent / "fixtures" / "corpus_torch211_cache" / "inductor_cache"


# -- Ray's log dumps in failure reports ------------------------------------------------------------
# When a raylet dies other than by SIGTERM (a node removed with allow_graceful=False, as the chaos
# tests do, or the ray CLI's `stop --force` run by anyone on this machine: it kills every Ray here, whatever
# its temp dir or ports), each of its agents publishes "Raylet is terminated. ... Last 20 lines of
# the Raylet logs:" with those lines (the raylet's "[state-dump]" tables and its own log lines), and
# every driver of the cluster prints that on stdout under "(raylet)", log_to_driver=False or not
# (ray/_private/process_watcher.py report_raylet_error_logs; ray/_private/worker.py
# listen_error_messages; Ray 2.60). Bursts of it in captured output, or in a subprocess's output a
# test shows, buried the assertion. A report keeps Ray's one-line messages and the test's own lines,
# and says how many dumped lines it left out.
_RAY_DUMP_LINE = re.compile(
    r"\[state-dump\]"  # the raylet's debug-state tables
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\] \((?:raylet|gcs_server)\) ")  # its own log lines
_REPORT_PREFIX = re.compile(r"E\s+|\s*")  # pytest's "E   " before an exception's lines, or indentation


def trim_ray_dumps(lines: list[str]) -> list[str]:
    """``lines`` with each run of Ray's dumped log lines replaced by one line saying how many."""
    out: list[str] = []
    dropped, prefix = 0, ""
    for line in [*lines, None]:
        if line is not None and _RAY_DUMP_LINE.search(line):
            if not dropped:
                prefix = _REPORT_PREFIX.match(line).group()  # type: ignore[union-attr]
            dropped += 1
            continue
        if dropped:
            out.append(f"{prefix}[{dropped} lines of a Ray log dump left out by tests/conftest.py; Ray's logs "
                       f"are in session_*/logs under its temp dir, {os.environ.get('RAY_TMPDIR', '/tmp')}/ray]")
            dropped = 0
        if line is not None:
            out.append(line)
    return out


def _trim_text(text: str) -> str:
    return "\n".join(trim_ray_dumps(text.split("\n"))) if _RAY_DUMP_LINE.search(text) else text


def _trim_longrepr(longrepr: object) -> object:
    """The failure's text (pytest's ExceptionChainRepr and the like) without Ray's dumps, in place
    so the report keeps its layout and the summary line (``-ra``) its message."""
    if isinstance(longrepr, str):
        return _trim_text(longrepr)
    for reprtraceback, reprcrash, _ in getattr(longrepr, "chain", ()):
        for entry in getattr(reprtraceback, "reprentries", ()):
            lines = getattr(entry, "lines", None)
            if lines and any(_RAY_DUMP_LINE.search(line) for line in lines):
                native = any(line.endswith("\n") for line in lines)  # ReprEntryNative: one blob
                entry.lines = [_trim_text("".join(lines))] if native else trim_ray_dumps(list(lines))
        if reprcrash is not None:
            reprcrash.message = _trim_text(reprcrash.message)
    sections = getattr(longrepr, "sections", None)
    if sections:
        sections[:] = [(name, _trim_text(content), sep) for name, content, sep in sections]
    return longrepr


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    report.sections = [(title, _trim_text(content)) for title, content in report.sections]
    if report.failed and report.longrepr is not None:
        report.longrepr = _trim_longrepr(report.longrepr)  # type: ignore[assignment]
    return report


# seconds of each long test file in CI's run (two processes, so each beside another file) on the
# 2-CPU box, 2026-11-27, stop 51: the order CI's two processes take files in (a file not here: 10 s
# for each slow test)
FILE_SECONDS = {
    "integration/test_frames_guards.py": 255, "integration/test_defaults.py": 170,
    "integration/test_cluster_ops.py": 218, "integration/test_token_auth.py": 200,
    "integration/test_warm_start.py": 185, "integration/test_reliability.py": 185,
    "integration/test_gpu_pool.py": 137, "integration/test_tuning_turns.py": 134,
    "integration/test_graph_compiles.py": 117, "integration/test_observability.py": 114,
    "integration/test_frames.py": 114, "integration/test_frames_backward.py": 87,
    "integration/test_models.py": 84, "integration/test_output_module.py": 80, "integration/test_farm.py": 80,
    "integration/test_single_flight.py": 74, "integration/test_cli.py": 65,
    "integration/test_multinode.py": 56, "integration/test_graph_flights.py": 50,
    "integration/test_metrics.py": 46, "integration/test_frames_fx_cache.py": 58,
    "integration/test_isa_libraries.py": 37, "integration/test_pool_start.py": 30,
    "integration/test_coordesc_workers.py": 31, "integration/test_orchestrator_errors.py": 20,
    "integration/test_autotune_decisions.py": 19, "integration/test_bad_input.py": 18,
    "unit/test_frames_key.py": 17, "integration/test_explain.py": 15, "integration/test_spread_configs.py": 14,
    "unit/test_layers.py": 12,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import collections

    import torch

    # the longest files first, each file's tests in their order: CI's run hands whole files to two
    # processes (-n 2 --dist loadfile), and a long file last would run alone
    slow = collections.Counter(item.path for item in items if "slow" in item.keywords)

    def seconds(item: pytest.Item) -> float:
        name = item.path.relative_to(item.path.parents[1]).as_posix()
        return FILE_SECONDS.get(name, 10.0 * slow[item.path])

    items.sort(key=lambda item: -seconds(item))
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


@pytest.fixture(scope="session")
def inductor_cache() -> pathlib.Path:
    return INDUCTOR_CACHE


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
        pytest.skip("the Redis tier is not tested: redis-server is not installed (apt-get install redis-server)")
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
