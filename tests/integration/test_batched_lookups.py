"""The ``ray://head`` tier answers an output module's lookups in one call to the head-node
service (``Cache.prefetch`` -> ``RayHeadTier.get_many``): real Ray, the real service actor."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib

import pytest

from raycompile.cache import Cache, Entry, Miss
from raycompile.cache.store import TierUnavailable
from raycompile.cache.tiered import local_tier
from raycompile.observe.stats import Stats
from raycompile.orchestrator import Farm
from raycompile.orchestrator.cache_service import RayHeadTier
from raycompile.settings import Settings
from raycompile.wrapper import compat

SECRET = b"s" * 32


def test_a_modules_lookups_are_one_call_to_the_head_service(local_ray: None, tmp_path: pathlib.Path) -> None:
    with Farm(Settings.resolve(), toolchain=compat.TOOLCHAIN):  # this process joins the cluster
        tier = RayHeadTier(SECRET, root=str(tmp_path / "head"), namespace=f"batched-{os.getpid()}")
        entries = [Entry(f"{i:02x}" * 32, {"payload": os.urandom(64)}, {"label": f"k{i}"}) for i in range(4)]
        for e in entries[:3]:
            tier.put(e)
        calls: list[str] = []
        real_call = tier._call

        def counted(method: str, *args: object) -> object:
            calls.append(method)
            return real_call(method, *args)

        tier._call = counted  # type: ignore[method-assign]
        stats = Stats()
        with concurrent.futures.ThreadPoolExecutor(2) as io:
            cache = Cache(local_tier(str(tmp_path / "local"), SECRET, None), tier, stats, submit=io.submit)
            assert cache.prefetch([e.key for e in entries]) == 4
            got = [cache.get(e.key) for e in entries]
        assert calls == ["get_raw_many"]  # one call for the four; no get of its own per key
        assert [g.blobs for g in got[:3]] == [e.blobs for e in entries[:3]] and got[3] is None
        assert stats.shared_hits == 3 and stats.misses == 1 and stats.shared_batches == 1
        # a tier made with another secret refuses every entry of the batch, as one by one
        other = RayHeadTier(b"another secret" * 3, root=str(tmp_path / "head"), namespace=f"batched-{os.getpid()}")
        refused = other.get_many([e.key for e in entries[:3]])
        assert all(isinstance(m, Miss) and m.reason == "refused" for m in refused.values())


def test_the_head_tiers_manifests_are_read_page_by_page_from_the_service_sessions_started(
        local_ray: None, tmp_path: pathlib.Path) -> None:
    """``raycompile cache explain --shared ray://head`` reads the head's entries as the Redis and
    file tiers give theirs: every manifest, unverified, a page a call; from the service a session
    started, looked up, never started by the reader."""
    namespace = f"manifests-{os.getpid()}"
    with Farm(Settings.resolve(), toolchain=compat.TOOLCHAIN):
        with pytest.raises(TierUnavailable, match="no session has used the ray://head tier"):
            RayHeadTier.existing(b"", namespace=namespace)  # none started in this namespace yet
        tier = RayHeadTier(SECRET, root=str(tmp_path / "head"), namespace=namespace)
        entries = [Entry(f"{i:02x}" * 32, {"payload": os.urandom(64)}, {"label": f"k{i}"}) for i in range(5)]
        for e in entries:
            tier.put(e)
        reader = RayHeadTier.existing(b"", namespace=namespace)
        reader.ping()
        calls: list[tuple[str, tuple[object, ...]]] = []
        real_call = reader._call

        def counted(method: str, *args: object) -> object:
            calls.append((method, args))
            return real_call(method, *args)

        reader._call = counted  # type: ignore[method-assign]
        got = dict(reader.manifests(page=2))
        assert sorted(got) == sorted(e.key for e in entries)
        assert all(json.loads(m)["body"]["meta"]["label"] == f"k{i}" for i, m in enumerate(got[e.key] for e in entries))
        assert [args for _, args in calls] == [("", 2), (entries[1].key, 2), (entries[3].key, 2)]
