"""Max-autotune Triton template choices for the tests, as ``select_algorithm`` hands them to the
tuning pool: objects with a ``bmreq`` (a real ``TritonGPUBenchmarkRequest`` for the corpus's
``triton_mm`` template) and a ``description``."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import torch

CORPUS = pathlib.Path(__file__).parent / "fixtures" / "corpus_torch211" / "kernels"


class Choice:
    def __init__(self, bmreq: object, description: str = "") -> None:
        self.bmreq, self.description = bmreq, description


def triton_mm_choices(tmp_path: pathlib.Path, configs: Sequence[tuple[int, int]]) -> list[Choice]:
    """One choice per (num_stages, num_warps), its module written under ``tmp_path``."""
    from torch._inductor.autotune_process import TensorMeta, TritonGPUBenchmarkRequest

    source = next(p for p in sorted(CORPUS.glob("*.py")) if "def triton_mm(" in p.read_text()).read_text()
    path = tmp_path / "triton_mm.py"
    path.write_text(source)
    meta = TensorMeta(device=torch.device("cuda", 0), dtype=torch.float16, sizes=(256, 256), strides=(256, 1),
                      offset=0, name="buf0")
    return [Choice(TritonGPUBenchmarkRequest("triton_mm", [meta, meta], meta, [], str(path), "key", num_stages=s,
                                             num_warps=w), f"num_stages={s}, num_warps={w}") for s, w in configs]
