"""A kernel served from the cache has its autotune winner looked up on the I/O thread that served
it, before the module waiting for it is handed the kernel (``hooks._winner_ahead``): the module's
own lookup (``runtime.stitch``, on the main thread, one kernel after another) is then answered from
the winner store's memory. Real parts: a reduction kernel Inductor generated for an H100 (torch 2.11
corpus), cross-compiled for sm_90 by real Triton in this process, its entry in a real signed file
tier, the session's real ``WinnerStore`` behind the real binding."""

from __future__ import annotations

import concurrent.futures
import pathlib
import threading
from typing import Any

import pytest
from local_router import KERNEL, CompilesHere, HeldPool, env_here, submit

from raycompile.cache import Cache
from raycompile.cache.tiered import local_tier
from raycompile.cache.winners import WinnerStore, put_winner
from raycompile.observe.stats import Stats
from raycompile.wrapper import runtime
from raycompile.wrapper.hooks import Router

triton = pytest.importorskip("triton")


def test_a_served_kernels_winner_is_looked_up_on_the_thread_that_served_it(
        corpus: pathlib.Path, held: HeldPool, tmp_path: pathlib.Path) -> None:
    source = (corpus / KERNEL).read_text()
    cache = Cache(local_tier(str(tmp_path / "rc"), b"k" * 32, None), None, Stats())
    io = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="served-io")
    first = Router(CompilesHere(), Stats(), lambda: held, lambda task: task(), cache=cache, io=io)
    try:
        submit(first, source, env_here()).result(120)  # compiled in this process, and cached
    finally:
        first.close()
    (key,) = [k for k in _keys(tmp_path / "rc")]
    winner = {"XBLOCK": 1, "R0_BLOCK": 2048, "num_warps": 16, "num_stages": 1}
    put_winner(cache, key, winner)

    store = WinnerStore(cache)
    asked: list[str] = []

    def lookup(k: str) -> Any:
        asked.append(threading.current_thread().name)
        return store.get(k)

    winners = runtime.Winners()
    winners.add(lookup)
    unbind = runtime.bind(runtime.Binding(winners))
    stats = Stats()
    second = Router(CompilesHere(), stats, lambda: held, lambda task: task(), cache=cache, io=io)
    try:
        future = submit(second, source, env_here())
        future.result(60)
        assert stats.jobs_local == 0  # served from the cache
        assert asked and asked[0].startswith("served-io")  # looked up where it was served
        assert store._memo.get(key) == winner  # kept: the module's own lookup is answered from memory
        assert runtime.winner_for(key) == winner
    finally:
        unbind()
        second.close()
        io.shutdown(wait=True)


def _keys(root: pathlib.Path) -> list[str]:
    """The kernel entries' keys in a local tier (each entry a directory with a manifest)."""
    return sorted({p.parent.name for p in root.rglob("manifest.json")})
