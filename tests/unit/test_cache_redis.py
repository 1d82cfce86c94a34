"""The Redis tier against a real redis-server started by the fixture."""

from __future__ import annotations

import os
import time

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
    start = time.monotonic()
    assert tier.get("ab" * 32).reason == "unavailable"
    with pytest.raises(TierUnavailable):  # Cache.put counts it in shared_unavailable and goes on
        tier.put(Entry("ab" * 32, {"x": b"1"}))
    assert time.monotonic() - start < 10
