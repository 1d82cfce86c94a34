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
    "demo: 0 cpus": (["demo", "--num-cpus", "0"], "num_cpus (or RAYCOMPILE_NUM_CPUS) must be >= 1"),
    "demo: nobody at the address": (["demo", "--address", "127.0.0.1:1"], "nothing answers there"),
    "demo: not an address": (["demo", "--address", "nohost"], "expected host:port"),
    "compile-kernels: no path": (["compile-kernels"], "required"),
    "compile-kernels: missing path": (["compile-kernels", "/nonexistent/kernels"], "no such file or directory"),
    "compile-kernels: unknown arch": (["compile-kernels", "CORPUS", "--arch", "sm_1"], "sm_1"),
    "compile-kernels: bad timeout": (["compile-kernels", "CORPUS", "--job-timeout", "-1"],
                                     "job_timeout_s (or RAYCOMPILE_JOB_TIMEOUT_S) must be > 0"),
    "cache: no action": (["cache"], "required: ACTION"),
    "cache: unknown action": (["cache", "frob"], "invalid choice"),
    "cache: an extra argument": (["cache", "stats", "extra"], "unrecognized arguments: extra"),
    "cache: export without a file": (["cache", "export"], "required: FILE"),
    "cache: bad size": (["cache", "prune", "--max-size", "lots"], "expected a size"),
    "cache: bad lasting cap": (["cache", "set-max-size", "5 parsecs"], "expected a size"),
    "cache: import of a missing archive": (["cache", "import", "/nonexistent.tar.gz"], "nonexistent"),
    "cache: shared tier not a file URL": (["cache", "stats", "--shared", "redis://x:1/0"], "only a file:///path"),
    "precompile: neither script nor spec": (["precompile"], "needs a SCRIPT or --spec FILE"),
    "precompile: a missing spec": (["precompile", "--spec", "nope.yaml"], "nope.yaml: cannot read it"),
    "precompile: high not an integer": (["precompile", "--spec", "SPEC:high"],
                                        "variant 0 ('b8'): 'inputs[0].high' must be an integer, got 'x'"),
    "precompile: requires_grad a string": (["precompile", "--spec", "SPEC:requires_grad"],
                                           "'inputs[0].requires_grad' must be true or false, got 'false'"),
    "precompile: an unknown field": (["precompile", "--spec", "SPEC:unknown"], "unknown key(s) ['shapes']"),
    "precompile: an entry point that does not import": (["precompile", "--spec", "SPEC:entry"],
                                                        "cannot import module 'nosuchmodule_xyz'"),
    "precompile: --print-schema with a spec": (["precompile", "--print-schema", "--spec", "SPEC:high"],
                                               "--print-schema takes no SCRIPT or --spec"),
}
SPECS = {  # what "SPEC:name" stands for: a YAML spec written to the test's directory
    "high": "variants:\n  - {name: b8, entry: 'raycompile.models:ReductionTail', inputs: [{shape: [8], high: x}]}\n",
    "requires_grad": "variants:\n  - {entry: 'raycompile.models:ReductionTail', "
                     "inputs: [{shape: [8], requires_grad: \"false\"}]}\n",
    "unknown": "variants:\n  - {entry: 'raycompile.models:ReductionTail', inputs: [], shapes: []}\n",
    "entry": "variants:\n  - {entry: 'nosuchmodule_xyz:f', inputs: [{shape: [8]}]}\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_usage_errors_exit_2_and_write_nothing(name: str, corpus: pathlib.Path, tmp_path: pathlib.Path) -> None:
    argv, message = CASES[name]
    argv = [str(sorted(corpus.glob("*.py"))[0]) if a == "CORPUS" else a for a in argv]
    for i, a in enumerate(argv):
        if a.startswith("SPEC:"):
            argv[i] = str(tmp_path / f"{a[5:]}.yaml")
            pathlib.Path(argv[i]).write_text(SPECS[a[5:]])
    cache = pathlib.Path(os.environ["RAYCOMPILE_CACHE_DIR"])
    proc = subprocess.run([sys.executable, "-m", "raycompile", *argv], capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not list(cache.rglob("manifest.json")), "a usage error wrote to the cache"


@pytest.mark.parametrize("kwargs, message", [
    (dict(job_timeout_s="soon"), "job_timeout_s"),
    (dict(job_timeout_s=0), "job_timeout_s (or RAYCOMPILE_JOB_TIMEOUT_S) must be > 0"),
    (dict(num_cpus=1.5), "num_cpus=1.5: expected int"),
    (dict(retries=-1), "retries (or RAYCOMPILE_RETRIES) must be >= 0"),
    (dict(cache_max_bytes=-5), "cache_max_bytes (or RAYCOMPILE_CACHE_MAX_BYTES) must be >= 0"),
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
    """enable() returns at once, without asking the network (it does not raise, though nothing
    answers and fallback is off); ready() (and any compile that needs the farm) says that nothing
    answers there: the connect check's answer, not a time-out's."""
    import ray

    raycompile.enable(address="127.0.0.1:1", fallback=False, connect_timeout_s=5)
    try:
        with pytest.raises(raycompile.FarmUnavailableError) as info:
            raycompile.ready()
        assert "127.0.0.1:1" in str(info.value) and "nothing answers there" in str(info.value), info.value
        assert not ray.is_initialized()
    finally:
        raycompile.disable()


def test_errors_say_what_to_do_and_pickle() -> None:
    import pickle

    for error in (raycompile.CompileError("triton_poi_0", "node1", "ptxas error"),
                  raycompile.VersionMismatchError("host (abc)", "torch 2.13 / triton 3.5", "torch 2.11 / triton 3.6"),
                  raycompile.FarmUnavailableError("10.0.0.1:6379", "nothing answers there"),
                  raycompile.SettingsError("x")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
