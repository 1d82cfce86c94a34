"""The CLI as a user runs it, in a subprocess: cross-compiling the captured corpus on CPU-only
workers, and bad input (exit 2, a clear message, no hang)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest


def run(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raycompile", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env={**os.environ, **(env or {})} if env else None)


# both extended (docs/testing.md): the 70 kernels of the corpus take two minutes of CI's run; the CLI
# cross-compiling real kernels for an arch, checked in the cubins' metadata, is
# test_compile_kernels_on_a_real_inductor_cache_dir, with a failing kernel
@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_kernels_cross_compiles_the_corpus(arch: str, corpus: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "triton-cache"
    proc = run("compile-kernels", str(corpus), "--arch", arch, "--out", str(out), "--num-cpus", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"^compiled (\d+) kernels \((\d+) failed\) in [\d.]+ s on (\d+) workers$", proc.stdout, re.M)
    assert m and m.groups() == ("70", "0", "2"), proc.stdout
    metas = [json.loads(p.read_text()) for p in out.glob("*/*.json") if not p.name.startswith("__grp__")]
    # identical kernel bodies share one Triton cache group; every distinct body has a cubin
    bodies = {p.read_text().split("@triton.jit", 1)[1] for p in corpus.glob("*.py")}
    assert len(list(out.glob("*/*.cubin"))) >= len(bodies)
    assert metas and {m["target"]["arch"] for m in metas} == {int(arch[3:])}


# extended (docs/testing.md): test_compile_kernels_on_a_real_inductor_cache_dir has a broken kernel too
@pytest.mark.extended
def test_a_broken_kernel_fails_the_run(corpus: pathlib.Path, tmp_path: pathlib.Path) -> None:
    good = sorted(corpus.glob("*.py"))[1]
    bad = tmp_path / "broken.py"
    bad.write_text(re.sub(r"(@triton\.jit\ndef \w+\(.*\):\n)", r"\1    x = = 1\n", good.read_text(), count=1))
    proc = run("compile-kernels", str(good), str(bad), "--num-cpus", "2")
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "SyntaxError" in proc.stdout
    assert "compiled 2 kernels (1 failed)" in proc.stdout


GOLDEN = pathlib.Path(__file__).parents[1] / "fixtures" / "golden"


# extended (docs/testing.md): a failing kernel beside output modules: test_compile_kernels_on_a_real_inductor_cache_dir
@pytest.mark.extended
def test_output_modules_are_skipped_and_only_kernels_fail(inductor_cache: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A directory as Inductor leaves one: output modules (stock's, from a real CUDA step, and
    raycompile's own), a kernel, a broken kernel and a file that is none. Exactly one failure, the
    broken kernel's, named; the output modules are skipped and counted, never compiled."""
    modules = sorted(p for p in inductor_cache.glob("*.py") if "def call(" in p.read_text())
    kernel = next(p for p in sorted(inductor_cache.glob("*.py")) if p not in modules)
    work = tmp_path / "cache"
    work.mkdir()
    for p in [*modules, kernel]:
        (work / p.name).write_text(p.read_text())
    ours = GOLDEN / "output_module_cuda_pointwise.py.txt"
    (work / "ours.py").write_text(ours.read_text().replace("<kernel source>", kernel.read_text()))
    name = re.search(r"^def (\w+)\(", kernel.read_text(), re.M).group(1)  # type: ignore[union-attr]
    broken = kernel.read_text().replace(name, "triton_broken_on_purpose")
    (work / "broken.py").write_text(re.sub(r"(@triton\.jit\ndef \w+\(.*\):\n)", r"\1    x = = 1\n", broken, count=1))
    (work / "helper.py").write_text("import torch\n\n\ndef helper() -> None:\n    pass\n")
    proc = run("compile-kernels", str(work), "--num-cpus", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED triton_broken_on_purpose"), proc.stdout
    assert "compiled 2 kernels (1 failed)" in proc.stdout, proc.stdout
    assert ("skipped 3 Inductor output modules (each holds call() and the wait on its kernels, which are compiled "
            "from their own files) and 1 .py file that is no Inductor Triton kernel") in proc.stdout, proc.stdout


@pytest.mark.slow  # the 7 kernels of a real Inductor cache dir
@pytest.mark.parametrize("arch", ["sm_80"])  # not the arch the sources record (sm_90): retargeted
def test_compile_kernels_on_a_real_inductor_cache_dir(arch: str, inductor_cache: pathlib.Path,
                                                     tmp_path: pathlib.Path) -> None:
    """The cache dir's 7 kernels and its 2 output modules, with a broken copy of one kernel beside
    them: the 7 are compiled for ``arch``, the broken one fails the run (exit 1), named."""
    work = tmp_path / "cache"
    work.mkdir()
    for p in inductor_cache.glob("*.py"):
        (work / p.name).write_text(p.read_text())
    kernel = next(p for p in sorted(inductor_cache.glob("*.py")) if "def call(" not in p.read_text())
    name = re.search(r"^def (\w+)\(", kernel.read_text(), re.M).group(1)  # type: ignore[union-attr]
    broken = kernel.read_text().replace(name, "triton_broken_on_purpose")
    (work / "broken.py").write_text(re.sub(r"(@triton\.jit\ndef \w+\(.*\):\n)", r"\1    x = = 1\n", broken, count=1))
    out = tmp_path / "triton-cache"
    proc = run("compile-kernels", str(work), "--arch", arch, "--out", str(out), "--num-cpus", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^compiled 8 kernels \(1 failed\) in [\d.]+ s on 2 workers$", proc.stdout, re.M), proc.stdout
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED triton_broken_on_purpose"), proc.stdout
    assert "SyntaxError" in failed[0] and "skipped 2 Inductor output modules" in proc.stdout, proc.stdout
    metas = [json.loads(p.read_text()) for p in out.glob("*/*.json") if not p.name.startswith("__grp__")]
    assert len(list(out.glob("*/*.cubin"))) >= 7
    assert metas and {m["target"]["arch"] for m in metas} == {int(arch[3:])}


def test_only_output_modules_exits_2(inductor_cache: pathlib.Path) -> None:
    modules = [str(p) for p in sorted(inductor_cache.glob("*.py")) if "def call(" in p.read_text()]
    proc = run("compile-kernels", *modules, timeout=60)
    assert proc.returncode == 2 and "no Inductor Triton kernels" in proc.stderr, proc.stderr
    assert "skipped 2 Inductor output modules" in proc.stderr, proc.stderr


@pytest.mark.parametrize("extra,message", [
    (["--arch", "sm_42"], "unknown arch 'sm_42'"),
    (["--address", "127.0.0.1:1"], "cannot reach Ray at 127.0.0.1:1"),
])
def test_bad_input_exits_2(extra: list[str], message: str, corpus: pathlib.Path) -> None:
    proc = run("compile-kernels", str(sorted(corpus.glob("*.py"))[0]), *extra, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr


def test_not_a_kernel_exits_2(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "model.py"
    f.write_text("import torch\n")
    proc = run("compile-kernels", str(f), timeout=60)
    assert proc.returncode == 2 and "not an Inductor Triton kernel" in proc.stderr


def test_usage_error_exits_2() -> None:
    proc = run("compile-kernels", timeout=60)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_help_shows_an_example() -> None:
    proc = run("compile-kernels", "--help", timeout=60)
    assert proc.returncode == 0 and "example: raycompile compile-kernels" in proc.stdout


def test_version_names_the_toolchain_it_runs_with() -> None:
    import ray
    import torch
    import triton

    import raycompile

    proc = subprocess.run([sys.executable, "-m", "raycompile", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"raycompile {raycompile.__version__} (torch {torch.__version__}, ")
    assert f"triton {triton.__version__}" in proc.stdout and f"ray {ray.__version__}" in proc.stdout


# -- every answer true ------------------------------------------------------------------------------


def test_status_with_no_cluster_running_says_how_to_start_one(tmp_path: pathlib.Path) -> None:
    """`status` never starts a Ray: its advice is to start a cluster or name one, not the usual
    "leave out the address to start an embedded local Ray"."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-m", "raycompile", "status"], capture_output=True, text=True, timeout=120,
                          check=False, env={**env, "RAY_TMPDIR": str(tmp_path)})  # no current-cluster file there
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot reach Ray at auto: no Ray cluster is running on this machine" in proc.stderr, proc.stderr
    assert ("`raycompile status` shows a running cluster: start one with `ray start --head` (on this machine it is "
            "then found with no address), or pass the address of one (--address host:6379, or RAY_ADDRESS)."
            ) in proc.stderr, proc.stderr
    assert "embedded" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,variable,value,message", [
    # the demo sets compile_jobs itself; compile-kernels sets fallback, and job_timeout_s from --job-timeout
    (["demo"], "RAYCOMPILE_COMPILE_JOBS", "clustr",
     "compile_jobs (or RAYCOMPILE_COMPILE_JOBS) must be 'auto', 'cluster' or 'local', got 'clustr'"),
    (["compile-kernels", "KERNEL"], "RAYCOMPILE_FALLBACK", "maybe",
     "fallback (or RAYCOMPILE_FALLBACK)='maybe' is not a valid bool"),
    (["compile-kernels", "KERNEL", "--job-timeout", "60"], "RAYCOMPILE_JOB_TIMEOUT_S", "-1",
     "job_timeout_s (or RAYCOMPILE_JOB_TIMEOUT_S) must be > 0, got -1.0"),
])
def test_a_bad_setting_is_an_error_where_the_command_overrides_it(args: list[str], variable: str, value: str,
                                                                 message: str, corpus: pathlib.Path) -> None:
    kernel = str(sorted(corpus.glob("*.py"))[0])
    proc = run(*[kernel if a == "KERNEL" else a for a in args], env={variable: value}, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"raycompile: {message}" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # the demo's three models, compiled locally
@pytest.mark.extended  # left out of CI's run (docs/testing.md): test_unreachable.py covers the addresses
def test_demo_with_an_unreachable_ray_address_warns_once_and_says_what_happened() -> None:
    proc = run("demo", env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if "ompiling locally" in line]
    assert len(warnings) == 1 and warnings[0].startswith("Compiling locally with stock Inductor"), proc.stderr
    assert "raycompile: cannot reach Ray at 127.0.0.1:1: nothing answers there" in proc.stderr, proc.stderr
    assert ("Ray at 127.0.0.1:1 could not be reached, so the models compile locally with stock Inductor"
            in proc.stdout), proc.stdout
    assert "was ready" not in proc.stdout and "unreachable" not in proc.stdout, proc.stdout
    fallbacks = int(re.search(r"fallbacks (\d+)", proc.stdout).group(1))  # type: ignore[union-attr]
    assert fallbacks > 0 and (f"without Ray: {fallbacks} compiles ran locally with stock Inductor, because: cannot "
                              "reach Ray at 127.0.0.1:1: nothing answers there") in proc.stdout, proc.stdout


def demo_in(cache: pathlib.Path, inductor: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """``raycompile demo`` as the README runs it (an embedded local Ray), with ``cache`` as
    raycompile's cache and ``inductor`` as Inductor's default cache dir."""
    proc = run("demo", env={"RAYCOMPILE_CACHE_DIR": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(inductor)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "all outputs match eager" in proc.stdout, proc.stdout[-3000:]
    return proc


def jobs_of(proc: subprocess.CompletedProcess[str]) -> int:
    return int(re.search(r"^  jobs (\d+)", proc.stdout, re.M).group(1))  # type: ignore[union-attr]


@pytest.mark.slow  # the README's main command, cold then warm: three models, a Ray start each time
def test_the_demo_compiles_cold_then_loads_everything_warm(tmp_path: pathlib.Path) -> None:
    """The README's ``raycompile demo``: a cold run compiles every kernel on the farm, forwards and
    the backwards lowered at ``disable()`` (the models' forwards ran no backward), and the next run
    loads the three compiled functions whole and compiles nothing."""
    cold = demo_in(tmp_path / "rc", tmp_path / "inductor")
    assert jobs_of(cold) > 0 and "published 3" in cold.stdout, cold.stdout[-3000:]
    warm = demo_in(tmp_path / "rc", tmp_path / "inductor")
    assert jobs_of(warm) == 0, warm.stdout[-3000:]
    assert "every kernel came from raycompile's cache" in warm.stdout and "3 loaded from entries" in warm.stdout


@pytest.mark.slow
@pytest.mark.extended  # a third run of the demo (docs/testing.md); the one above is CI's
def test_the_demo_after_its_cache_was_cleared_is_warm_on_its_next_run(tmp_path: pathlib.Path) -> None:
    """After ``raycompile cache clear`` (a new cache here), Inductor's own cache dir still holds the
    backwards' C++ kernels of the run before. The demo lowers them inside its fresh Inductor cache,
    so they go to the farm and its cache again, and the next run compiles nothing (until stop 63
    they were loaded from Inductor's dir, without a job, and the next run compiled them)."""
    demo_in(tmp_path / "first", tmp_path / "inductor")
    demo_in(tmp_path / "cleared", tmp_path / "inductor")
    warm = demo_in(tmp_path / "cleared", tmp_path / "inductor")
    assert jobs_of(warm) == 0, warm.stdout[-3000:]
