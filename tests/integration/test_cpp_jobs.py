"""A C++ build job is self-contained: a node without this one's files gets the kernel's source
with the job (torch 2.13 leaves CppBuilder's own source list empty outside fbcode)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from farmrun import compile_fresh

import raycompile
from raycompile.models import examples
from raycompile.wrapper import hooks  # the Router calls hooks.cpp_job_for


def test_cpp_jobs_carry_their_kernel_source(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []
    real = hooks.cpp_job_for

    def recording(*args: Any, **kwargs: Any) -> Any:
        job = real(*args, **kwargs)
        if job is not None:
            made.append(job)
        return job

    monkeypatch.setattr(hooks, "cpp_job_for", recording)
    model, args = examples()["reduction_tail"]
    raycompile.enable(compile_jobs="local")  # the job itself is what is checked, not where it runs
    try:
        out = compile_fresh(model, args)
    finally:
        raycompile.disable()
    assert made
    for job in made:
        sources = [path for path in job.inputs if path.endswith(".cpp")]
        assert sources, (job.label, sorted(job.inputs))
        for path in sources:
            assert b"kernel" in job.inputs[path]  # the source itself (its file is gone with the compile)
    torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)
