"""The batched shared lookup (``Cache.prefetch``) never waits behind the lookups that wait for it."""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import threading

import pytest

from raycompile.cache import Cache, Entry
from raycompile.cache.tiered import DeferredTier, local_tier
from raycompile.observe.stats import Stats

SECRET = b"p" * 32


def test_a_lookup_queued_before_its_batch_is_answered_by_the_batch(tmp_path: pathlib.Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold compile submits its kernels' lookups to the session's I/O threads from Inductor's
    codegen; the output module's batch for the same keys comes after them. The batch used to be
    queued on those threads too, so every lookup ahead of it waited for it until
    ``PREFETCH_WAIT_S`` (60 s, a cold Mixtral step on an H200). Here the one I/O thread is busy
    when the lookup is queued, the batch is asked for after it, and the lookup is answered from
    the batch once the thread is free."""
    import raycompile.cache.tiered as tiered

    monkeypatch.setattr(tiered, "PREFETCH_WAIT_S", 120.0)  # the old code waited this long; the test fails at 30 s
    shared_file = local_tier(str(tmp_path / "shared"), SECRET, None)
    entry = Entry("ab" * 32, {"payload": os.urandom(64)}, {"label": "k"})
    shared_file.put(entry)
    ready: concurrent.futures.Future[object] = concurrent.futures.Future()
    ready.set_result(shared_file)
    shared = DeferredTier(ready, timeout_s=30.0)  # a file:// tier signed with the cluster secret, as a session has it
    local = local_tier(str(tmp_path / "local"), SECRET, None)
    stats = Stats()
    io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="test-io")
    gate = threading.Event()
    try:
        cache = Cache(local, shared, stats, submit=io.submit)
        busy = io.submit(gate.wait, 30)  # the I/O thread, busy with the compile's earlier work
        lookup = io.submit(cache.get, entry.key)  # a kernel's lookup, queued from codegen
        assert cache.prefetch([entry.key]) == 1  # the output module loads: its batch
        gate.set()
        busy.result(timeout=30)
        got = lookup.result(timeout=30)
    finally:
        gate.set()
        io.shutdown(wait=False)
    assert isinstance(got, Entry) and got.blobs == entry.blobs
    assert stats.shared_hits == 1 and stats.shared_batches == 1 and stats.misses == 0
