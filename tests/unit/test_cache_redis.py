"""The Redis tier against a real redis-server started by the fixture."""

from __future__ import annotations

import os

import pytest
import redis

from raycompile.cache import Entry, Miss, RedisTier
from raycompile.cache.store import TierUnavailable

SECRET = b"k" * 32


def test_roundtrip_and_corruption_and_refusal(redis_url: str) -> None:
    tier = RedisTier(redis_url, SECRET)
    e = Entry("ef" * 32, {"payload": os.urandom(3000), "triton/G/k.cubin": os.urandom(500)}, {"label": "k"})
    assert tier.put(e) == e.size
    got = tier.get(e.key)
    assert isinstance(got, Entry) and got.blobs == e.blobs
    client = redis.Redis.from_url(redis_url)
    client.hset(f"raycompile:entry:{e.key}", "payload", b"flipped")
    assert tier.get(e.key).reason == "corrupt"  # and dropped...
    assert tier.get(e.key) == Miss("absent")
    tier.put(e)  # ...repaired by the next write
    assert isinstance(tier.get(e.key), Entry)
    assert RedisTier(redis_url, b"other secret").get(e.key).reason == "refused"


def test_unreachable_redis_is_a_miss_not_a_crash() -> None:
    tier = RedisTier("redis://127.0.0.1:1/0", SECRET)
    assert tier.get("ab" * 32).reason == "unavailable"
    with pytest.raises(TierUnavailable):  # Cache.put counts it in shared_unavailable and goes on
        tier.put(Entry("ab" * 32, {"x": b"1"}))


def test_a_modules_kernels_are_looked_up_in_one_round_trip(redis_url: str, tmp_path: object) -> None:
    """``Cache.prefetch``: the keys the local tier lacks go to Redis as ONE pipelined request (the
    server's command count says so), in the background; each ``get`` then takes its answer: hits
    copied to the local tier, an absent key a miss without a second round trip, a tampered entry
    refused as ever."""
    import concurrent.futures
    import pathlib

    from raycompile.cache import Cache
    from raycompile.cache.tiered import local_tier
    from raycompile.observe.stats import Stats

    client = redis.Redis.from_url(redis_url)
    shared = RedisTier(redis_url, SECRET)
    entries = [Entry(f"{i:02x}" * 32, {"payload": os.urandom(100)}, {"label": f"k{i}"}) for i in range(6)]
    for e in entries[:5]:
        shared.put(e)
    client.hset(f"raycompile:entry:{entries[4].key}", "payload", b"tampered")
    local = local_tier(str(pathlib.Path(str(tmp_path)) / "local"), SECRET, None)
    local.put(entries[0])  # already here: not asked for
    stats = Stats()
    with concurrent.futures.ThreadPoolExecutor(2) as io:
        cache = Cache(local, shared, stats, submit=io.submit)
        before = client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
        assert cache.prefetch([e.key for e in entries] + [entries[1].key]) == 5  # deduplicated

        def no_lookup_of_its_own(key: str) -> None:
            raise AssertionError(f"{key[:8]} was looked up alone, not from the batch")

        shared.get = no_lookup_of_its_own  # type: ignore[method-assign]
        got = [cache.get(e.key) for e in entries]
        after = client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    assert after - before == 5  # the five keys, in one pipeline: no lookup of its own per get
    assert [g.blobs if g else None for g in got[:4]] == [e.blobs for e in entries[:4]]
    assert got[4] is None and got[5] is None
    assert stats.local_hits == 1 and stats.shared_hits == 3 and stats.corrupt == 1 and stats.misses == 2
    assert stats.shared_batches == 1 and all(local.has(e.key) for e in entries[:4])
    assert cache.prefetch([e.key for e in entries[:4]]) == 0  # all local now: nothing to ask
