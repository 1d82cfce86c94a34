"""Where single-flight claims live (``cache/inflight.py``): a node's directory, a shared
directory (every node that mounts it), Redis and the lease board that the ``ray://head`` service
holds; each with a real lock (``flock``: one per open file description, so two claims of one
process contend as two processes do), a real redis-server, or the board on an injected clock. The
owner publishes frames in flight as signed entries of the claims' tier; waiters read the newest;
the owner's end (done or gone) is seen; old blobs are dropped. Another host's waiter is an
announcement file named with another host id (this machine has one host). The ``ray://head``
service itself, through Ray: tests/integration/test_single_flight.py."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from raycompile.cache import inflight
from raycompile.cache.inflight import (
    CLUSTER,
    NODE,
    OWNER,
    WAITER,
    Claims,
    InFlight,
    LeaseBoard,
    LeaseInFlight,
    RedisLeases,
)
from raycompile.cache.store import Entry, FileTier, RedisTier

SECRET = b"k" * 32


def _flow(owner: inflight.FlightClaim, waiter: inflight.FlightClaim, tier: FileTier | RedisTier) -> None:
    """The protocol every store keeps: roles, publish/latest, the index's done, drops."""
    assert (owner.role, waiter.role) == (OWNER, WAITER)
    assert waiter.latest() == (None, False)  # nothing published; the owner is alive
    assert owner.waiters() == 1 and waiter.owner_alive()
    for n in (1, 2, 3):
        owner.publish(f"frames {n}".encode(), n)
    blob, finished = waiter.latest()
    assert blob == b"frames 3" and not finished  # the newest only
    assert waiter.latest() == (None, False)  # nothing newer
    token = owner.token
    assert isinstance(tier.get(f"{owner.key}.inflight.{token}.2"), Entry)  # the one before stays
    assert not isinstance(tier.get(f"{owner.key}.inflight.{token}.1"), Entry)  # older ones go
    owner.release(done=True)
    assert waiter.latest() == (None, True)
    assert not isinstance(tier.get(f"{owner.key}.inflight.{token}.3"), Entry)  # the entry in the tiers serves now
    waiter.stop_waiting()


def test_a_directory_claim_one_owner_then_its_end(tmp_path: pathlib.Path) -> None:
    tier = FileTier(str(tmp_path / "tier"), SECRET)
    node = InFlight(str(tmp_path / "flights"), tier)
    owner, waiter = node.claim("k1"), node.claim("k1")
    assert owner.where == waiter.where == NODE
    _flow(owner, waiter, tier)
    assert node.claim("k1").role == OWNER  # the lock is free again


def test_a_dead_owner_is_seen_by_its_free_lock(tmp_path: pathlib.Path) -> None:
    node = InFlight(str(tmp_path / "flights"), FileTier(str(tmp_path / "tier"), SECRET))
    owner, waiter = node.claim("k"), node.claim("k")
    os.close(owner._fd)  # as the kernel does when the owner dies: the lock drops, nothing said
    assert waiter.latest() == (None, True) and not waiter.owner_alive()


def test_waiters_on_other_hosts_count_while_they_refresh(tmp_path: pathlib.Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    node = InFlight(str(tmp_path / "flights"), FileTier(str(tmp_path / "tier"), SECRET), CLUSTER)
    owner = node.claim("k")
    assert owner.waiters() == 0
    remote = tmp_path / "flights" / "k.waiting.0123abcd-999999999"  # another host's pid: never checked here
    remote.touch()
    local_dead = tmp_path / "flights" / f"k.waiting.{inflight.HOST}-999999999"  # this host's, no such pid
    local_dead.touch()
    assert owner.waiters() == 1 and not local_dead.exists()
    old = time.time() - inflight.FRESH_S - 1
    os.utime(remote, (old, old))  # it stopped refreshing: that host's waiter is gone
    assert owner.waiters() == 0
    waiter = node.claim("k")
    assert owner.waiters() == 1
    announced = pathlib.Path(waiter._waiting())
    os.utime(announced, (old, old))
    monkeypatch.setattr(waiter, "_announced", 0.0)
    waiter.latest()  # a waiter refreshes its announcement as it polls
    assert time.time() - announced.stat().st_mtime < inflight.FRESH_S


def test_a_redis_claim_one_owner_then_its_end(redis_url: str) -> None:
    tier = RedisTier(redis_url, SECRET)
    flights = LeaseInFlight(tier, RedisLeases(tier._client))
    owner, waiter = flights.claim("r1"), flights.claim("r1")
    assert owner.where == waiter.where == CLUSTER
    redis = pytest.importorskip("redis")  # redis-py: a dependency; a machine without it skips the Redis cases
    client = redis.Redis.from_url(redis_url)
    lease = client.get("raycompile:flight:r1:lock").decode()
    assert lease == owner.token and lease.split("-")[1] == str(os.getpid())  # who holds it, readable
    _flow(owner, waiter, tier)
    assert client.get("raycompile:flight:r1:lock") is None
    assert flights.claim("r1").role == OWNER


def test_a_redis_owner_that_stops_renewing_is_gone(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a lease of 1 s, renewed every 0.3 s for 1.5 s: it outlives its first term only by renewal;
    # between a renewal and the read after it a loaded machine would have to stall a whole second
    monkeypatch.setattr(inflight, "LEASE_S", 1.0)
    tier = RedisTier(redis_url, SECRET)
    flights = LeaseInFlight(tier, RedisLeases(tier._client))
    owner, waiter = flights.claim("r2"), flights.claim("r2")
    for _ in range(5):  # the owner's watcher renews as it counts waiters
        assert owner.waiters() == 1 and waiter.owner_alive()
        time.sleep(0.3)
    deadline = time.monotonic() + 10  # then it dies: its lease lapses
    while waiter.owner_alive():
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.05)
    assert waiter.latest() == (None, True)
    assert flights.claim("r2").role == OWNER  # the next claimant owns it


def test_the_head_services_board_one_owner_then_its_end_or_its_lapse(tmp_path: pathlib.Path) -> None:
    now = [0.0]
    board = LeaseBoard(clock=lambda: now[0])
    tier = FileTier(str(tmp_path / "shared"), SECRET, "shared")
    flights = LeaseInFlight(tier, board)
    owner, waiter = flights.claim("h1"), flights.claim("h1")
    _flow(owner, waiter, tier)
    owner, waiter = flights.claim("h2"), flights.claim("h2")
    assert inflight.FRESH_S < 2 * inflight.LEASE_S * 0.9
    now[0] += inflight.LEASE_S * 0.9
    assert owner.waiters() == 1  # counting renews the lease
    now[0] += inflight.LEASE_S * 0.9
    assert waiter.owner_alive()  # renewed above: still held
    assert owner.waiters() == 0  # the waiter stopped refreshing its announcement: gone
    now[0] += inflight.LEASE_S + 1  # the owner stopped renewing (it died)
    assert not waiter.owner_alive() and waiter.latest() == (None, True)
    assert flights.claim("h2").role == OWNER


def test_claims_go_where_the_shared_tier_is_else_to_the_node(tmp_path: pathlib.Path, redis_url: str) -> None:
    local = FileTier(str(tmp_path / "local"), SECRET)
    node = InFlight(str(tmp_path / "node-flights"), local)
    shared: list[object] = [None]
    claims = Claims(node, lambda: shared[0])
    assert claims.claim("a").where == NODE  # no shared tier (or not known yet)
    shared[0] = FileTier(str(tmp_path / "shared"), SECRET, "shared")
    first = claims.claim("b")
    assert first.where == CLUSTER and (tmp_path / "shared" / "flights" / "b.lock").exists()
    assert Claims(node, lambda: RedisTier(redis_url, SECRET)).claim("c").where == CLUSTER

    class Broken:  # a ray://head tier whose service is an older one, without leases
        def leases(self) -> object:
            return object()
    assert Claims(node, lambda: Broken()).claim("f").where == NODE  # warned; one owner per node


def test_redis_down_falls_back_to_the_nodes_claims(tmp_path: pathlib.Path,
                                                   redis_server: tuple[object, str]) -> None:
    proc, url = redis_server
    node = InFlight(str(tmp_path / "node-flights"), FileTier(str(tmp_path / "local"), SECRET))
    tier = RedisTier(url, SECRET, timeout_s=0.5)
    claims = Claims(node, lambda: tier)
    owner, waiter = claims.claim("d"), claims.claim("d")
    proc.terminate()  # type: ignore[attr-defined]
    proc.wait(timeout=10)  # type: ignore[attr-defined]
    assert waiter.latest() == (None, True)  # unanswered: the waiter compiles it itself
    assert claims.claim("e").where == NODE  # new claims: one owner per node
    owner.release()  # never raises
