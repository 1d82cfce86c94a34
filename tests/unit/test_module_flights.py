"""Whole-graph single flight (``wrapper/module_cache.ModuleFlights``) between two claimants of one
node's flights dir (each with its own lock handle, as two processes have), while Dynamo's real
compile lock is held as it is during a compile: one owns a graph, the other waits for its entry;
an owner never waits on itself; an owner that stops compiling without an entry lets its waiter go."""

from __future__ import annotations

import concurrent.futures
import pathlib
from collections.abc import Iterator

import pytest
import torch
import torch._functorch.config
from torch._dynamo.convert_frame import compile_lock

from raycompile.cache import Cache, Entry
from raycompile.cache.inflight import InFlight
from raycompile.cache.tiered import local_tier
from raycompile.observe.stats import Stats
from raycompile.wrapper.module_cache import ModuleFlights

SECRET = b"m" * 32
KEY = "aot-" + "cd" * 30


@pytest.fixture()
def node(tmp_path: pathlib.Path) -> Iterator[tuple[Cache, list[tuple[ModuleFlights, Stats]]]]:
    cache = Cache(local_tier(str(tmp_path / "node"), SECRET, None), None, Stats())
    claimants = []
    for _ in range(2):
        stats = Stats()
        claimants.append((ModuleFlights(InFlight(str(tmp_path / "node" / "flights"), cache.local), cache, stats, 30.0),
                          stats))
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        yield cache, claimants
    for flights, _ in claimants:
        flights.close()


def _get(flights: ModuleFlights) -> Entry | None:
    """``flights.get`` in another thread, compiling as compiled frames do (torch's config
    overrides are per thread)."""
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        return flights.get(KEY)


def _waiter(pool: concurrent.futures.Executor, flights: ModuleFlights,
            tmp: pathlib.Path) -> concurrent.futures.Future[Entry | None]:
    """``_get`` started, once it waits (its announcement, another claimant's file: polled)."""
    waiter = pool.submit(_get, flights)
    for _ in range(300):
        if any((tmp / "node" / "flights").glob(f"{KEY}.waiting.*")) or waiter.done():
            break
        concurrent.futures.wait([waiter], timeout=0.1)
    assert not waiter.done(), waiter.result()
    return waiter


def test_one_owns_the_other_is_served_and_an_owner_never_waits_on_itself(node, tmp_path: pathlib.Path) -> None:
    cache, ((owner, owner_stats), (other, other_stats)) = node
    with compile_lock, concurrent.futures.ThreadPoolExecutor(1) as pool:  # the owner is compiling
        assert owner.get(KEY) is None and owner_stats.graph_flight_owned == 1
        assert owner.get(KEY) is None  # an identical graph of its next frame: compiled, not waited on
        assert owner_stats.graph_flight_gave_up == 0 and owner_stats.graph_flight_served == 0
        waiter = _waiter(pool, other, tmp_path)
        cache.put(Entry(KEY, {"value": b"the compiled graph"}, {"label": "aot module"}))
        owner.put(KEY)
        got = waiter.result(timeout=30)
    assert isinstance(got, Entry) and got.blobs["value"] == b"the compiled graph"
    assert other_stats.graph_flight_served == 1 and other_stats.graph_flight_gave_up == 0


def test_an_owner_that_stops_compiling_without_an_entry_lets_its_waiter_compile(node, tmp_path: pathlib.Path) -> None:
    _, ((owner, _), (other, other_stats)) = node
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with compile_lock:
            assert owner.get(KEY) is None
            waiter = _waiter(pool, other, tmp_path)
        # Dynamo's lock is free: the owner's compile is over and wrote nothing (a bypassed save)
        assert waiter.result(timeout=30) is None
    assert other_stats.graph_flight_gave_up == 1 and other_stats.graph_flight_served == 0
