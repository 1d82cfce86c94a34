"""Real torch.compile of three real models through the farm on a real local Ray: outputs are
bitwise equal to stock Inductor's, and the kernels were built in Ray workers."""

from __future__ import annotations

import os

import pytest
import torch
from farmrun import compile_fresh

import raycompile
from raycompile.models import examples
from raycompile.wrapper import compat

pytestmark = pytest.mark.slow  # three models compiled twice each (stock and farm), bitwise compared


@pytest.mark.parametrize("name", ["transformer_block", "convnet_bn", "reduction_tail"])
def test_farm_output_is_bitwise_stock(name: str, local_ray: None) -> None:
    model, args = examples()[name]
    stock = compile_fresh(model, args)
    raycompile.enable()
    try:
        farm = compile_fresh(model, args)
        s = raycompile.stats()
    finally:
        raycompile.disable()
    assert torch.equal(farm, stock)
    assert s["jobs"] > 0 and s["failures"] == 0 and s["fallbacks"] == 0
    assert os.getpid() not in s["workers"] and sum(s["workers"].values()) == s["jobs"]
    assert s["compile_seconds"] > 0


def test_dynamic_shapes(farm_on: None) -> None:
    model, (x,) = examples()["reduction_tail"]
    torch._dynamo.reset()
    with compat.fresh_cache():
        f = torch.compile(model, dynamic=True)
        outs = [f(x[:n]) for n in (3, 5, 8)]
    for n, out in zip((3, 5, 8), outs):
        torch.testing.assert_close(out, model(x[:n]), rtol=1e-5, atol=1e-5)
    assert raycompile.stats()["jobs"] > 0


def test_on_off_on_leaves_no_stale_hooks(local_ray: None) -> None:
    ac = compat.async_compile_class()
    stock_pool, stock_submit = ac.__dict__["process_pool"], ac.__dict__["submit"]
    threads = compat.inductor_config().compile_threads
    model, args = examples()["reduction_tail"]
    outs = []
    for i, on in enumerate((True, False, True)):
        if on:
            raycompile.enable()
        outs.append(compile_fresh(model, args))
        s = raycompile.stats()
        if on:
            # the first time the farm compiles; the second time its local cache serves every kernel
            assert (s["jobs"] > 0 and s["local_hits"] == 0) if i == 0 else (s["jobs"] == 0 and s["local_hits"] > 0)
            raycompile.disable()
        assert ac.__dict__["process_pool"] is stock_pool and ac.__dict__["submit"] is stock_submit
        assert compat.inductor_config().compile_threads == threads
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])
