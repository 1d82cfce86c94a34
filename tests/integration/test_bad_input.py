"""Bad input to every CLI command and public function: a clear error that says what to do, exit
status 2 for usage errors, and nothing written to the cache."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import raycompile

CASES = {
    "no command": ([], "required"),
    "unknown command": (["frobnicate"], "invalid choice"),
    "demo: 0 cpus": (["demo", "--num-cpus", "0"], "num_cpus must be >= 1"),
    "demo: nobody at the address": (["demo", "--address", "127.0.0.1:1"], "nothing answers there"),
    "demo: not an address": (["demo", "--address", "nohost"], "expected host:port"),
    "compile-kernels: no path": (["compile-kernels"], "required"),
    "compile-kernels: missing path": (["compile-kernels", "/nonexistent/kernels"], "no such file or directory"),
    "compile-kernels: unknown arch": (["compile-kernels", "CORPUS", "--arch", "sm_1"], "sm_1"),
    "compile-kernels: bad timeout": (["compile-kernels", "CORPUS", "--job-timeout", "-1"], "job_timeout_s must be > 0"),
    "cache: unknown action": (["cache", "frob"], "invalid choice"),
    "cache: export without a file": (["cache", "export"], "needs a FILE"),
    "cache: bad size": (["cache", "prune", "--max-size", "lots"], "expected a size"),
    "cache: import of a missing archive": (["cache", "import", "/nonexistent.tar.gz"], "nonexistent"),
    "cache: shared tier not a file URL": (["cache", "stats", "--shared", "redis://x:1/0"], "only a file:///path"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_usage_errors_exit_2_and_write_nothing(name: str, corpus: pathlib.Path, tmp_path: pathlib.Path) -> None:
    argv, message = CASES[name]
    argv = [str(sorted(corpus.glob("*.py"))[0]) if a == "CORPUS" else a for a in argv]
    cache = pathlib.Path(os.environ["RAYCOMPILE_CACHE_DIR"])
    proc = subprocess.run([sys.executable, "-m", "raycompile", *argv], capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not list(cache.rglob("manifest.json")), "a usage error wrote to the cache"


@pytest.mark.parametrize("kwargs, message", [
    (dict(job_timeout_s="soon"), "job_timeout_s"),
    (dict(job_timeout_s=0), "job_timeout_s must be > 0"),
    (dict(num_cpus=1.5), "num_cpus=1.5: expected int"),
    (dict(retries=-1), "retries must be >= 0"),
    (dict(cache_max_bytes=-5), "cache_max_bytes must be >= 0"),
    (dict(fallback="maybe"), "not a valid bool"),
    (dict(shared_cache="ftp://host/cache"), "expected auto, none, ray://head"),
    (dict(cache_dirr="/tmp/x"), "unknown setting(s) ['cache_dirr']"),
])
def test_enable_with_bad_settings_raises_settings_error_and_starts_nothing(kwargs: dict[str, object],
                                                                          message: str) -> None:
    import ray

    with pytest.raises(raycompile.SettingsError) as info:
        raycompile.enable(**kwargs)
    assert message in str(info.value)
    assert not raycompile.is_enabled() and not ray.is_initialized()
    assert not list(pathlib.Path(os.environ["RAYCOMPILE_CACHE_DIR"]).rglob("manifest.json"))


def test_enable_an_unreachable_address_without_fallback_raises_quickly() -> None:
    import time

    start = time.monotonic()
    with pytest.raises(raycompile.FarmUnavailableError) as info:
        raycompile.enable(address="127.0.0.1:1", fallback=False, connect_timeout_s=5)
    assert "127.0.0.1:1" in str(info.value) and time.monotonic() - start < 30
    assert not raycompile.is_enabled()


def test_errors_say_what_to_do_and_pickle() -> None:
    import pickle

    for error in (raycompile.CompileError("triton_poi_0", "node1", "ptxas error"),
                  raycompile.VersionMismatchError("host (abc)", "torch 2.13 / triton 3.5", "torch 2.11 / triton 3.6"),
                  raycompile.FarmUnavailableError("10.0.0.1:6379", "nothing answers there"),
                  raycompile.SettingsError("x")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
