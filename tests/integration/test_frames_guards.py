"""Compiled frames notice what stock notices (issue 31): the guard scenarios of ``guards_driver.py``
(a rebound global function, class or module, a rebound global before the first call, a type passed
in, a replaced ``__call__``, closure cell or closed-over module's submodule, a module's attribute
and submodule, a library's registry that does not survive a pickle and a value changed in it, a
library's custom op called through its ``torch.ops`` namespace,
another shape and dtype, and a user's own backend) run in new processes, each with
empty Inductor and raycompile caches of its own, against one ``file://`` shared tier:

- stock Inductor, every step: the outputs and the graphs traced at each step (torch's counter);
- raycompile compiling (defaults: compiled frames on): bitwise stock's outputs, and a trace at
  exactly the steps where stock traces;
- raycompile loading what that process wrote: stock's outputs, nothing traced at any step, except
  the user backend's frame, which is never loaded (its compile step ran: its side effect counted)
  and the global rebound before the call (the loading process's global is another function);
- raycompile loading what a process wrote that ran only each scenario's first step: it traces at
  exactly the later steps where stock traces, so a change it meets after the load is noticed.

CI's run has stock, the process that compiles each scenario's first step, and the process that
loads it and meets every change; the full compiling and loading processes are an extended test.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any

import procs
import pytest
import torch

pytestmark = pytest.mark.slow  # three compiling subprocesses a test

DRIVER = pathlib.Path(__file__).with_name("guards_driver.py")


def start(where: pathlib.Path, mode: str, part: str, shared: str = "") -> Callable[[], dict[str, Any]]:
    """A driver process started now; call what this returns for its results. Processes that do
    not depend on each other run side by side (each is mostly one thread)."""
    out = where / "out.pt"
    where.mkdir(parents=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"),
           "TRITON_CACHE_DIR": str(where / "triton")}
    for name in ("RAY_ADDRESS", "RAYCOMPILE_DYNAMO_CACHE", "RAYCOMPILE_SHARED_CACHE"):
        env.pop(name, None)
    args = [mode, part, str(out)] + ([shared, str(where / "raycompile")] if mode == "farm" else [])
    return procs.start(DRIVER, args, env, out, timeout=900)


def run(where: pathlib.Path, mode: str, part: str, shared: str = "") -> dict[str, Any]:
    return start(where, mode, part, shared)()


def steps(result: dict[str, Any]) -> dict[tuple[str, str], tuple[torch.Tensor, int]]:
    return {(name, label): (value, traced) for name, rows in result["results"].items()
            for label, value, traced in rows}


def check(name: str, result: dict[str, Any], stock: dict[tuple[str, str], tuple[torch.Tensor, int]]) -> None:
    """``result``'s outputs are stock's, bitwise, and it traced where ``name``'s process should."""
    got = steps(result)
    if name == "first":  # each scenario's first step only
        scenarios = {n for n, _ in stock}
        assert got.keys() <= stock.keys() and {n for n, _ in got} == scenarios and len(got) == len(scenarios), name
    else:
        assert got.keys() == stock.keys(), name
    for step, (value, traced) in got.items():
        want, stock_traced = stock[step]
        # "first" skips the later steps, whose changes (rebound globals) the next scenarios see in
        # stock's run: its outputs are not stock's run's, and only its traces are compared
        if name != "first":
            assert value.dtype == want.dtype and torch.equal(value, want), (name, step, value, want)
        if name in ("compiling", "first") or step[0] == "user backend":  # a user's backend: never loaded
            expect = stock_traced
        elif name == "loading":
            expect = 0
        elif step[0] == "global rebound before the call":  # the entry's global is another function
            expect = stock_traced
        else:  # the entry holds each scenario's first step only
            expect = 0 if step[1] in ("first", "bool") else stock_traced
        assert traced == expect, (name, step, traced, expect)


def stock_steps(done: Callable[[], dict[str, Any]]) -> dict[tuple[str, str], tuple[torch.Tensor, int]]:
    stock = steps(done())
    # stock traces at the first call and after each change (shape and dtype: a recompile each)
    assert all(traced == 1 for (name, label), (_, traced) in stock.items() if label != "its calls"), stock
    return stock


def compile_then_load(tmp_path: pathlib.Path, part: str) -> tuple[dict[tuple[str, str], tuple[torch.Tensor, int]],
                                                                   dict[str, Any], dict[str, Any]]:
    """Stock (every step) beside a farm process running ``part`` (``full`` or ``first``) into a
    shared tier of its own; then a farm process running every step, loading from that tier."""
    tier = f"file://{tmp_path / ('shared-' + part)}"
    stock_done = start(tmp_path / "stock", "stock", "full")
    compiling = run(tmp_path / f"compiling-{part}", "farm", part, tier)
    stock = stock_steps(stock_done)
    return stock, compiling, run(tmp_path / f"loading-{part}", "farm", "full", tier)


def test_compiled_frames_notice_what_stock_notices(tmp_path: pathlib.Path) -> None:
    """A process compiles each scenario's first step and writes it; a process that loads that
    entry meets every change: it traces at exactly the steps where stock traces (a guard lost in
    the entry would let a changed call run the old frame), with stock's outputs, bitwise."""
    stock, compiling, later = compile_then_load(tmp_path, "first")
    check("first", compiling, stock)
    check("loading, then changed", later, stock)

    s = compiling["stats"]
    assert s["dynamo_published"] >= 1 and s["dynamo_invalid"] == 0, s
    assert any("not Inductor" in why for why in s["dynamo_unsaveable_reasons"]), s  # the user backend, counted
    w = later["stats"]
    assert w["dynamo_hits"] >= 10 and w["dynamo_invalid"] == 0 and w["fallbacks"] == 0, w


# extended (docs/testing.md): every change met in a process that compiles (each traced where stock
# traces) and a process that loads every step's frames; CI's run meets every change after a load
@pytest.mark.extended
def test_a_process_that_compiled_every_step_and_one_that_loads_it_trace_as_they_should(tmp_path: pathlib.Path) -> None:
    stock, compiling, loading = compile_then_load(tmp_path, "full")
    check("compiling", compiling, stock)
    check("loading", loading, stock)
    w = loading["stats"]
    assert w["dynamo_hits"] >= 10 and w["dynamo_invalid"] == 0 and w["fallbacks"] == 0, w
