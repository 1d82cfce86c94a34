"""Cross-compiling real Inductor kernels (captured on an H200 with torch 2.11) on this CPU-only
machine, in-process: the job code alone, without Ray."""

from __future__ import annotations

import json
import pathlib

import pytest

from raycompile.kernels import Built, Failed, Versions, run_job
from raycompile.wrapper.compat import TOOLCHAIN, retarget
from raycompile.wrapper.job_keys import triton_job
from raycompile.wrapper.kernel_sources import read_kernel

pytest.importorskip("triton")


@pytest.mark.parametrize("arch", [80, 90])
def test_cross_compiles_for_the_target_arch(arch: int, corpus_files: list[pathlib.Path],
                                            tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    src = read_kernel(str(next(p for p in corpus_files if "triton_per_" in p.read_text())))
    job = triton_job(src.name, retarget(src.source, arch), {"TRITON_CACHE_DIR": str(tmp_path)})
    result = run_job(job, TOOLCHAIN)
    assert isinstance(result, Built), getattr(result, "message", "")
    metas = [json.loads(d) for p, d in result.files.items()
             if p.endswith(".json") and not pathlib.Path(p).name.startswith("__grp__")]
    assert metas and all(m["target"]["arch"] == arch for m in metas)
    assert any(p.endswith(".cubin") for p in result.files)
    assert result.payload  # the pickled CachingAutotuner the driver restores
    assert result.key == job.key and job.versions == Versions.here()  # the result names the job's identity


def test_a_broken_kernel_fails_with_its_message(corpus_files: list[pathlib.Path]) -> None:
    src = read_kernel(str(corpus_files[0]))
    broken = src.source.replace("@triton.jit\ndef ", "@triton.jit\ndef (", 1)
    result = run_job(triton_job(src.name, broken), TOOLCHAIN)
    assert isinstance(result, Failed) and "SyntaxError" in result.message
