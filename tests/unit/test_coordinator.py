"""The cluster coordinator as a plain class (no Ray): claim, wait, done, lease expiry, takeover;
and a driver's client (ClusterDedupe) against it, with time driven by the test."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest
from waiting import wait_until

from raycompile.observe.stats import Stats
from raycompile.orchestrator.coordinator import ClusterDedupe, Coordinator


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_first_claimant_compiles_the_others_wait_then_read(clock: Clock) -> None:
    c = Coordinator(clock)
    assert c.claim("k", "a", 10) == "compile"
    assert c.claim("k", "b", 10) == "wait" and c.claim("k", "c", 10) == "wait"
    assert c.poll("b", ["k"], 10) == {"k": "wait"}
    assert [e["waiters"] for e in c.state()["in_flight"]] == [2]
    c.done("k", "a")
    assert c.poll("b", ["k"], 10) == {"k": "done"} and c.poll("c", ["k"], 10) == {"k": "done"}
    assert c.claim("k", "d", 10) == "done"  # a late driver reads the entry instead of compiling
    assert c.state()["in_flight"] == [] and c.counts["compiles"] == 1


def test_the_owner_claiming_again_keeps_its_lease(clock: Clock) -> None:
    c = Coordinator(clock)
    assert c.claim("k", "a", 10) == "compile" and c.claim("k", "a", 10) == "compile"
    assert c.claim("k", "b", 10) == "wait"


def test_an_expired_lease_is_taken_over_by_one_waiter(clock: Clock) -> None:
    c = Coordinator(clock)
    c.claim("k", "a", 10)
    c.claim("k", "b", 10)
    c.claim("k", "c", 10)
    clock.now += 11  # the owner died: it stopped renewing
    assert c.poll("b", ["k"], 10) == {"k": "compile"}
    assert c.poll("c", ["k"], 10) == {"k": "wait"}  # b holds a fresh lease now
    assert c.renew("a", ["k"], 10) == ["k"]  # the old owner learns it lost the key
    c.done("k", "a", ok=False)  # its late failure does not end b's compile
    assert c.poll("c", ["k"], 10) == {"k": "wait"}
    c.done("k", "b")
    assert c.poll("c", ["k"], 10) == {"k": "done"}
    assert c.counts["takeovers"] == 1


def test_renewing_keeps_the_lease_alive(clock: Clock) -> None:
    c = Coordinator(clock)
    c.claim("k", "a", 10)
    for _ in range(5):
        clock.now += 8
        assert c.renew("a", ["k"], 10) == []
        assert c.poll("b", ["k"], 10) == {"k": "wait"}


def test_a_failed_compile_lets_waiters_compile_and_is_not_remembered_as_done(clock: Clock) -> None:
    c = Coordinator(clock)
    c.claim("k", "a", 10)
    c.claim("k", "b", 10)
    c.done("k", "a", ok=False)
    assert c.poll("b", ["k"], 10) == {"k": "failed"}
    assert c.claim("k", "c", 10) == "compile"  # a later driver tries again


def test_a_restarted_coordinator_lets_the_owner_hold_its_keys_again(clock: Clock) -> None:
    fresh = Coordinator(clock)  # the actor restarted: state lost
    assert fresh.renew("a", ["k"], 10) == []
    assert fresh.claim("k", "b", 10) == "wait"


def test_done_keys_are_remembered_up_to_a_bound(clock: Clock) -> None:
    c = Coordinator(clock, remember=2)
    for k in "xyz":
        c.claim(k, "a", 10)
        c.done(k, "a")
    assert c.claim("x", "b", 10) == "compile" and c.claim("z", "b", 10) == "done"


# -- the driver's client ------------------------------------------------------------------------


class Direct:
    """A plain Coordinator behind ``.method.remote(...)``, as ClusterDedupe calls an actor."""

    def __init__(self, target: Coordinator | None) -> None:
        self._target = target
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        outer = self

        class Method:
            @staticmethod
            def remote(*args: Any) -> Any:
                if outer._target is None:
                    raise ConnectionError("coordinator unreachable")
                with outer._lock:
                    return getattr(outer._target, name)(*args)

        return Method


def client(coordinator: Coordinator | None, **kw: Any) -> ClusterDedupe:
    kw.setdefault("poll_s", 0.01)
    return ClusterDedupe(Direct(coordinator), lambda value, timeout: value, Stats(), "file:///shared", **kw)


class Driver:
    """Records what ClusterDedupe asked of it."""

    def __init__(self, cache: set[str]) -> None:
        self.cache, self.compiled, self.reused = cache, [], []
        self.futures: list[Future[Any]] = []

    def compile(self, key: str, publish: bool = False) -> Future[Any]:
        self.compiled.append(key)
        f: Future[Any] = Future()
        self.futures.append(f)
        if publish:
            self.cache.add(key)
            f.set_result(None)
        return f

    def reuse(self, key: str) -> bool:
        if key in self.cache:
            self.reused.append(key)
            return True
        return False


def eventually(cond: Any, timeout: float = 60.0) -> None:
    """Until ``cond()``: another thread of the client changes it (a time-out only a hang reaches)."""
    wait_until(cond, timeout, "the coordinator's client", interval=0.01)


def test_two_drivers_one_compile() -> None:
    coord, cache = Coordinator(), set()
    a, b = client(coord), client(coord)
    da, db = Driver(cache), Driver(cache)
    try:
        a.run("k", lambda: da.compile("k"), lambda: da.reuse("k"))
        b.run("k", lambda: db.compile("k"), lambda: db.reuse("k"))
        assert da.compiled == ["k"] and db.compiled == [] and db.reused == []
        cache.add("k")  # a publishes, then its future resolves
        da.futures[0].set_result(None)
        eventually(lambda: db.reused == ["k"])
        assert db.compiled == [] and b.stats.dedupe_cluster == 1 and a.stats.dedupe_cluster == 0
    finally:
        a.close()
        b.close()


def test_a_dead_owner_is_taken_over_after_its_lease() -> None:
    coord, cache = Coordinator(), set()
    dead = client(coord, lease_s=0.3)
    dead.run("k", lambda: Future(), lambda: False)  # claims, then never renews nor finishes
    dead._closed = True  # the process is gone: no more renewals, no done
    with dead._lock:
        dead._wake.notify_all()
    b, db = client(coord, lease_s=0.3), Driver(cache)
    try:
        b.run("k", lambda: db.compile("k", publish=True), lambda: db.reuse("k"))
        assert db.compiled == []
        eventually(lambda: db.compiled == ["k"])
        assert coord.counts["takeovers"] == 1
    finally:
        b.close()


def test_a_wait_times_out_and_compiles_here() -> None:
    coord, cache = Coordinator(), set()
    a, b = client(coord), client(coord, wait_timeout_s=0.2)
    da, db = Driver(cache), Driver(cache)
    try:
        a.run("k", lambda: da.compile("k"), lambda: da.reuse("k"))  # a renews but never finishes
        b.run("k", lambda: db.compile("k", publish=True), lambda: db.reuse("k"))
        eventually(lambda: db.compiled == ["k"])
    finally:
        a.close()
        b.close()


def test_an_unreachable_coordinator_means_compile_here_counted() -> None:
    c, d = client(None), Driver(set())
    c.run("k1", lambda: d.compile("k1", publish=True), lambda: d.reuse("k1"))
    c.run("k2", lambda: d.compile("k2", publish=True), lambda: d.reuse("k2"))  # skipped, no new time-out
    assert d.compiled == ["k1", "k2"] and c.stats.coordinator_unavailable == 2
    c.close()


def test_drivers_on_different_shared_tiers_do_not_wait_on_each_other() -> None:
    coord = Coordinator()
    a = client(coord)
    b = ClusterDedupe(Direct(coord), lambda v, t: v, Stats(), "redis://other/0")
    da, db = Driver(set()), Driver(set())
    a.run("k", lambda: da.compile("k"), lambda: da.reuse("k"))
    b.run("k", lambda: db.compile("k"), lambda: db.reuse("k"))
    assert da.compiled == ["k"] and db.compiled == ["k"]
    a.close()
    b.close()
