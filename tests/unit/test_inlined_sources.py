"""Dynamo's record of the sources a compiled frame inlines (``SourceInfo.add_code``), made once per
code object while raycompile's frames are on (``compat.precompile.sources_recorded_once``): torch
records a function again each time a frame inlines it (once per layer of a model), each time
reading and tokenizing its file; the records must be the ones stock makes."""

from __future__ import annotations

import inspect

import pytest
from torch._dynamo import package

from raycompile.wrapper.compat import precompile


def helper(x: int) -> int:
    return x + 1


def other(x: int) -> int:
    return x * 2


def test_each_code_is_read_once_and_recorded_as_stock_records_it(monkeypatch: pytest.MonkeyPatch) -> None:
    stock = package.SourceInfo(inlined_sources=set())
    for code in (helper.__code__, other.__code__):
        stock.add_code(code)

    reads = []
    real = inspect.getsourcelines

    def counted(obj: object) -> object:
        reads.append(obj)
        return real(obj)

    monkeypatch.setattr(inspect, "getsourcelines", counted)
    torchs = package.SourceInfo.__dict__["add_code"]
    ours = package.SourceInfo(inlined_sources=set())
    with precompile.sources_recorded_once():
        for _ in range(16):  # sixteen layers inlining the same two functions
            ours.add_code(helper.__code__)
            ours.add_code(other.__code__)
    assert ours.inlined_sources == stock.inlined_sources
    assert sum(1 for obj in reads if inspect.iscode(obj)) == 2  # stock: 32
    assert package.SourceInfo.__dict__["add_code"] is torchs  # restored on exit


def test_a_code_stock_does_not_record_is_not_recorded() -> None:
    namespace: dict[str, object] = {}
    exec("def made(x):\n    return x\n", namespace)  # noqa: S102 - a function of no module
    code = namespace["made"].__code__  # type: ignore[attr-defined]
    stock = package.SourceInfo(inlined_sources=set())
    stock.add_code(code)
    ours = package.SourceInfo(inlined_sources=set())
    with precompile.sources_recorded_once():
        for _ in range(2):
            ours.add_code(code)
    assert ours.inlined_sources == stock.inlined_sources == set()
