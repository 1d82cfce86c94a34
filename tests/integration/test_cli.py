"""The CLI as a user runs it, in a subprocess: cross-compiling the captured corpus on CPU-only
workers, and bad input (exit 2, a clear message, no hang)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raycompile", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.slow  # the 70 kernels of the corpus, twice (test_a_broken_kernel_fails_the_run is the quick run)
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


def test_a_broken_kernel_fails_the_run(corpus: pathlib.Path, tmp_path: pathlib.Path) -> None:
    good = sorted(corpus.glob("*.py"))[1]
    bad = tmp_path / "broken.py"
    bad.write_text(re.sub(r"(@triton\.jit\ndef \w+\(.*\):\n)", r"\1    x = = 1\n", good.read_text(), count=1))
    proc = run("compile-kernels", str(good), str(bad), "--num-cpus", "2")
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "SyntaxError" in proc.stdout
    assert "compiled 2 kernels (1 failed)" in proc.stdout


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
