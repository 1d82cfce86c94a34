"""Real torch.compile of three real models through the farm on a real local Ray (one 2-CPU node,
tests/integration/conftest.py; RAYCOMPILE_COMPILE_JOBS=cluster, tests/conftest.py), checked for
what a user relies on:

- the output is bitwise that of stock Inductor with the same settings, weights, inputs and seed;
- each C++ kernel of the output module was built by exactly one Ray job, in a Ray worker (none in
  this process, none locally, none failed, retried or fallen back to stock);
- a second compile in a fresh Dynamo state with an empty Inductor cache (what a new process sees)
  is served from raycompile's cache: hits, no job, and a bitwise equal output.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
from typing import Any

import pytest
import torch
from farmrun import write_frames

import raycompile
from raycompile.models import examples
from raycompile.wrapper import compat

pytestmark = pytest.mark.slow  # each model compiled three times (stock, farm cold, farm warm), on 2 CPUs

MODELS = ["transformer_block", "convnet_bn", "reduction_tail"]
_DEFINITION = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)


def cold_compile(name: str, sizes: tuple[int, ...] = (), **kw: Any) -> tuple[list[torch.Tensor], list[dict[str, str]]]:
    """Model ``name`` (fresh from ``examples()``: seeded weights and inputs) compiled in a fresh
    Dynamo state with an empty Inductor cache, on disk and in memory, so nothing comes from an
    earlier compile of this process. Returns its outputs (one per size in ``sizes``, the input's
    leading dimension cut to it; else one) and, for each output module the farm wrote (the
    backward's too: its forward ran without one, so the farm lowers it ahead), its kernels
    (name -> how the module defines it: ``cpp_pybinding``, ``triton``...). Stock modules: none."""
    model, (x,) = examples()[name]
    torch.compiler.reset()
    with compat.fresh_cache():
        torch.manual_seed(0)
        compiled = torch.compile(model, **kw)
        outs = [compiled(x[:n]) for n in sizes] if sizes else [compiled(x)]
        write_frames()  # the backward these forwards did not run is lowered now, in this fresh cache
        modules = [dict(_DEFINITION.findall(pathlib.Path(m.__file__).read_text()))
                   for m in compat.loaded_output_modules()]
    return outs, modules


def equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def cpp_kernels(modules: list[dict[str, str]]) -> int:
    """How many kernels the output modules define, each a C++ one (a CPU model's)."""
    assert modules and all(set(kernels.values()) == {"cpp_pybinding"} for kernels in modules), modules
    return sum(len(kernels) for kernels in modules)


def check_built_once_each_on_ray(s: dict[str, Any], cpp_kernels: int) -> None:
    """Every C++ kernel of the output modules was one Ray job, run in a Ray worker, and nothing
    else ran: no local build, no failure, retry or fallback to stock Inductor."""
    assert s["jobs"] == cpp_kernels and s["jobs_local"] == 0 and s["deduped"] == 0, (cpp_kernels, s)
    assert s["failures"] == s["fallbacks"] == s["retried"] == 0, s
    assert s["local_hits"] == s["shared_hits"] == 0 and s["misses"] >= cpp_kernels, s  # a cold cache
    assert os.getpid() not in s["workers"] and sum(s["workers"].values()) == s["jobs"], s
    assert s["compile_seconds"] > 0


@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.extended) if m != "reduction_tail" else m
                                  for m in MODELS])  # convnet_bn, transformer_block: extended (docs/testing.md)
def test_bitwise_stock_one_job_per_kernel_then_served_from_cache(name: str, local_ray: None) -> None:
    stock, stock_modules = cold_compile(name)
    assert stock_modules == []  # stock Inductor wrote it: the farm was not in the way

    with raycompile.enabled():
        farm, modules = cold_compile(name)
        s = raycompile.stats()
    assert equal(farm, stock)
    kernels = cpp_kernels(modules)
    check_built_once_each_on_ray(s, kernels)

    with raycompile.enabled():  # a new session: its counters start at zero
        warm, warm_modules = cold_compile(name)
        w = raycompile.stats()
    assert equal(warm, stock)
    assert warm_modules == modules
    assert w["jobs"] == w["jobs_local"] == w["deduped"] == w["fallbacks"] == w["failures"] == 0, w
    # by default the compiled frame is served whole (nothing traced), and its modules load each
    # kernel from the cache; no lookup missed (test_on_off_on_leaves_no_stale_hooks checks the
    # kernels-only path, FX-graph entries included)
    assert w["dynamo_hits"] >= 1 and w["dynamo_frames_traced"] == 0 and w["dynamo_misses"] == 0, w
    assert w["local_hits"] >= kernels and w["misses"] == 0 and w["refused"] == w["corrupt"] == 0, w


def test_dynamic_shapes(local_ray: None) -> None:
    """One compile serves every size, bitwise stock's at each; each kernel, the backward's too, is
    one Ray job."""
    sizes = (3, 5, 8)
    stock, _ = cold_compile("reduction_tail", sizes, dynamic=True)
    with raycompile.enabled():
        farm, modules = cold_compile("reduction_tail", sizes, dynamic=True)
        s = raycompile.stats()
    assert equal(farm, stock)
    assert len(modules) == 2  # forward and backward (sizes saved for it: compiled at once), for every size
    check_built_once_each_on_ray(s, cpp_kernels(modules))


def test_on_off_on_leaves_no_stale_hooks(local_ray: None) -> None:
    ac = compat.async_compile_class()
    stock_pool, stock_submit = ac.__dict__["process_pool"], ac.__dict__["submit"]
    threads = compat.inductor_config().compile_threads
    outs = []
    for i, on in enumerate((True, False, True)):
        # kernels only: with compiled frames (the default) the third run would be one frame's hit
        with raycompile.enabled(dynamo_cache=False) if on else contextlib.nullcontext():
            out, modules = cold_compile("reduction_tail")
            s = raycompile.stats()
        outs.append(out)
        assert len(modules) == int(on), (i, [list(m) for m in modules])  # farm-made modules only while it is on
        if i == 0:  # the farm compiles every kernel
            check_built_once_each_on_ray(s, cpp_kernels(modules))
        if i == 2:  # its cache serves every kernel
            assert s["jobs"] == s["jobs_local"] == s["misses"] == 0 and s["local_hits"] > cpp_kernels(modules), s
        assert ac.__dict__["process_pool"] is stock_pool and ac.__dict__["submit"] is stock_submit
        assert compat.inductor_config().compile_threads == threads
    assert equal(outs[0], outs[1]) and equal(outs[1], outs[2])
