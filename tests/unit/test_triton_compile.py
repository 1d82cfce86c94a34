"""Cross-compiling real Inductor kernels (captured on an H200 with torch 2.11) on this CPU-only
machine, in-process: the job code alone, without Ray."""

from __future__ import annotations

import json
import pathlib

import pytest

from raycompile.kernels import Built, Failed, TritonJob, Versions, run_job
from raycompile.kernels.sources import read_kernel
from raycompile.kernels.triton_compile import retarget

pytest.importorskip("triton")


@pytest.mark.parametrize("arch", [80, 90])
def test_cross_compiles_for_the_target_arch(arch: int, corpus_files: list[pathlib.Path],
                                            tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    src = read_kernel(str(next(p for p in corpus_files if "triton_per_" in p.read_text())))
    result = run_job(TritonJob(src.name, retarget(src.source, arch), Versions.here(),
                               {"TRITON_CACHE_DIR": str(tmp_path)}))
    assert isinstance(result, Built), getattr(result, "message", "")
    metas = [json.loads(d) for p, d in result.files.items()
             if p.endswith(".json") and not pathlib.Path(p).name.startswith("__grp__")]
    assert metas and all(m["target"]["arch"] == arch for m in metas)
    assert any(p.endswith(".cubin") for p in result.files)
    assert result.payload  # the pickled CachingAutotuner the driver restores


def test_a_broken_kernel_fails_with_its_message(corpus_files: list[pathlib.Path]) -> None:
    src = read_kernel(str(corpus_files[0]))
    broken = src.source.replace("@triton.jit\ndef ", "@triton.jit\ndef (", 1)
    result = run_job(TritonJob(src.name, broken, Versions.here()))
    assert isinstance(result, Failed) and "SyntaxError" in result.message
