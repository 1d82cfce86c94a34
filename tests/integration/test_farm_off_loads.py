"""A farm-made output module loads where the farm is off, also with one compile thread: its
``FarmCompile`` never asks for stock's process pool there (which asserts with one thread, and
would start a sidecar process that stock's C++ path never starts), and compiles as stock does."""

from __future__ import annotations

import pathlib

import pytest
import torch

from raycompile.wrapper import runtime

KERNEL = 'extern "C" void kernel(float* in_out_ptr0) { in_out_ptr0[0] += 1.0f; }'


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cpp_kernel_loads_with_the_farm_off(threads: int, tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert runtime._bound is None  # no session: the farm is off
    started = AsyncCompile.process_pool.cache_info().currsize
    with config.patch(compile_threads=threads):
        compile_ = runtime.FarmCompile()
        for _ in range(2):  # built, then found built in Inductor's dir
            loaded = compile_.cpp_pybinding(["float*"], KERNEL, key="k")
            kernel = loaded.result() if hasattr(loaded, "result") else loaded
            x = torch.zeros(1)
            kernel(x)
            assert x.item() == 1.0
    assert AsyncCompile.process_pool.cache_info().currsize == started  # no pool asked for
