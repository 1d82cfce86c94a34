"""Max-autotune decisions shared through the cache (cache/decisions.py, wrapper/decisions.py's
SharedDecisions): real torch.compile under max-autotune on this CPU. With ``freezing``, Inductor
has two candidates for each linear layer (its C++ GEMM template and MKL's packed linear) and times
both for real: a decision, on CPU as on a GPU."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import pytest
import torch

import raycompile
from raycompile.cache.decisions import DecisionStore
from raycompile.wrapper import compat

pytestmark = pytest.mark.slow  # four real max-autotune compiles


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()


X = torch.randn(16, 64)


def node(tmp: pathlib.Path, name: str, shared: str) -> tuple[dict[str, Any], torch.Tensor, list[str]]:
    """A fresh node's session (its own empty raycompile and Inductor caches, the shared tier; no
    compiled frames, so the graph is lowered here and each decision is made); stats, output, and the
    output modules' sources."""
    from torch._inductor import config

    raycompile.enable(cache_dir=str(tmp / name), shared_cache=shared, address="", compile_jobs="local",
                      dynamo_cache=False)
    before = set(map(id, compat.loaded_output_modules()))
    try:
        torch._dynamo.reset()
        with compat.fresh_cache(), config.patch(freezing=True), torch.no_grad():
            out = torch.compile(_model(), mode="max-autotune-no-cudagraphs")(X)
            # this compile's output modules (fresh_cache forgets them on exit), without the comments
            # that name this process's objects (ids, paths, a constant's address)
            sources = ["\n".join(re.sub(r" [0-9a-f]{8,16}$", "", ln) for ln in open(m.__file__).read().splitlines()
                                  if not ln.lstrip().startswith("#"))
                       for m in compat.loaded_output_modules() if id(m) not in before]
    finally:
        raycompile.disable()
    return raycompile.stats(), out, sources


def _flip(url: str) -> int:
    """In the shared tier, make the slower candidate of every stored decision the faster (the
    entry dropped and filed again, signed with this user's key); how many were flipped."""
    from raycompile.cache.signing import load_secret
    from raycompile.cache.store import Entry
    from raycompile.cache.tiered import shared_tier

    tier = shared_tier(url, load_secret())
    flipped = 0
    for key, _ in list(tier.manifests()):
        entry = tier.get(key)
        if not isinstance(entry, Entry) or "timings.json" not in entry.blobs:
            continue
        timings = json.loads(entry.blobs["timings.json"])
        assert len(timings) == 2, timings
        slow = max(timings, key=timings.__getitem__)
        tier.drop(key)
        tier.put(Entry(key, {"timings.json": json.dumps({h: 0.0 if h == slow else 1.0 for h in timings}).encode()},
                       entry.meta))
        flipped += 1
    return flipped


def test_a_decision_made_on_one_node_is_taken_by_the_next(tmp_path: pathlib.Path) -> None:
    shared = f"file://{tmp_path / 'shared'}"
    a, out_a, sources_a = node(tmp_path, "a", shared)
    # two linear layers of different shapes: two decisions, each timed here and filed
    assert a["autotune_decisions_timed"] == 2 and a["autotune_decisions_shared"] == 0, a

    # the next node takes both: nothing timed, the same picks (output modules), the same result
    b, out_b, sources_b = node(tmp_path, "b", shared)
    assert b["autotune_decisions_shared"] == 2 and b["autotune_decisions_timed"] == 0, b
    assert sources_a and sorted(sources_b) == sorted(sources_a) and torch.equal(out_b, out_a)
    assert "max-autotune decisions: 2 taken from the cache" in raycompile.report()

    # the picks are the stored timings' fastest: with each decision's slower candidate made the
    # faster in the store, a third node picks the other kernels (its output modules differ)
    assert _flip(shared) == 2
    c, out_c, sources_c = node(tmp_path, "c", shared)
    assert c["autotune_decisions_shared"] == 2 and c["autotune_decisions_timed"] == 0, c
    assert sorted(sources_c) != sorted(sources_a)
    torch.testing.assert_close(out_c, out_a, rtol=1e-4, atol=1e-4)


def test_a_decision_filed_first_is_adopted(tmp_path: pathlib.Path) -> None:
    """A process that timed a decision another filed meanwhile takes the filed one (put_first)."""
    store = DecisionStore(None)
    assert store.put_first("k", {"x": 1.0, "y": 2.0}) == {"x": 1.0, "y": 2.0}
    assert store.put_first("k", {"x": 3.0, "y": 0.5}) == {"x": 1.0, "y": 2.0}
