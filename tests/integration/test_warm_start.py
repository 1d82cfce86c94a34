"""Warm start across nodes, for each shared tier, with zero configuration (no RAYCOMPILE_SECRET:
the cluster holds the secret): the driver compiles a model on a two-node cluster; then a NEW
process on the OTHER node (a Ray task pinned there), with its own EMPTY local cache, compiles the
same model with zero Ray jobs and equal outputs. A tampered shared entry is refused and
recompiled, never loaded."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from raystart import ray_cluster

import raycompile
from raycompile.models import examples
from raycompile.wrapper import compat

pytestmark = pytest.mark.slow  # a two-node cluster; each shared tier compiled cold, then warm on the other node


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[str]:
    import ray

    with ray_cluster({"num_cpus": 1}):
        here = ray.get_runtime_context().get_node_id()
        yield next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)


def compile_model(cache_dir: str, shared: str, threads: int = 0) -> tuple[dict[str, Any], torch.Tensor]:
    """Compile a model through the farm with the given tiers; return stats and output.

    Self-contained (imports inside), so Ray ships it by value to run on another node."""
    import torch


    if threads:
        # Ray workers run with OMP_NUM_THREADS=1; Inductor's C++ kernels depend on the thread
        # count, so match the driver's, as another node with the same hardware would.
        torch.set_num_threads(threads)
    model, args = examples()["reduction_tail"]
    # an inference step (no_grad): no backward to lower at disable() (lazy backwards and their
    # warm starts are test_frames_backward.py's), so the two nodes' compiles cost half
    with compat.fresh_cache():
        raycompile.enable(address="auto", cache_dir=cache_dir, shared_cache=shared)
        try:
            torch._dynamo.reset()
            with torch.no_grad():
                out = torch.compile(model)(*args)
            return raycompile.stats(), out
        finally:
            raycompile.disable()


def on_other_node(node: str, cache_dir: str, shared: str) -> tuple[dict[str, Any], torch.Tensor]:
    """A NEW process on the OTHER node: a Ray task pinned there."""
    import ray
    from ray import cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # by value: this test module is not importable on the workers
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # another node has another home: its own user key (XDG_CONFIG_HOME), none of this process's
    other_home = os.path.join(cache_dir, "home")
    task = ray.remote(compile_model).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        runtime_env={"env_vars": {"XDG_CONFIG_HOME": other_home}})
    return ray.get(task.remote(cache_dir, shared, torch.get_num_threads()), timeout=600)


# redis and file: extended (docs/testing.md). The Redis tier is in test_reliability.py and
# tests/unit/test_cache_redis.py; a fresh process warm-starting from a file tier in
# test_defaults.py, and from another node with the cluster's secret here with ray-head
@pytest.fixture(params=["ray-head", pytest.param("file", marks=pytest.mark.extended),
                        pytest.param("redis", marks=pytest.mark.extended)])
def shared(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "ray-head":
        return "auto"  # the default on a multi-node cluster: the head-node cache service
    if request.param == "file":
        return f"file://{tmp_path / 'shared'}"
    return request.getfixturevalue("redis_url").replace("/0", f"/{abs(hash(str(tmp_path))) % 15 + 1}")


def test_a_new_process_on_another_node_warm_starts(two_nodes: str, shared: str, tmp_path: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    a_stats, a_out = compile_model(str(tmp_path / "local-a"), shared)
    assert a_stats["jobs"] > 0 and a_stats["bytes_written"] > 0
    b_stats, b_out = on_other_node(two_nodes, str(tmp_path / "local-b"), shared)
    # B's hits: the compiled frame A published (nothing traced, compiled frames being on by
    # default) and every kernel its modules load
    assert b_stats["jobs"] == 0 and b_stats["shared_hits"] >= a_stats["jobs"] and b_stats["local_hits"] == 0, (
        a_stats, b_stats)
    assert b_stats["dynamo_hits"] >= 1 and b_stats["dynamo_frames_traced"] == 0, b_stats
    assert b_stats["refused"] == 0
    assert torch.equal(a_out, b_out)
    if shared == "auto":  # the head's tier explained: in this process, and by the CLI (joining this cluster)
        explained_head_tier(tmp_path / "local-a", capsys)


def explained_head_tier(cache_dir: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A's misses (its cold lookups, kept in its cache dir) set against the ``ray://head`` tier's
    entries, with the cluster's secret recognized as their signer: by ``raycompile.explain()`` for
    the last session here, and by `raycompile cache explain --shared ray://head`."""
    from raycompile import cli

    with open(cache_dir / "misses.json") as f:
        missed = len(json.load(f))
    lines = raycompile.explain()
    assert len(lines) == missed > 0 and not any("instead of" in line for line in lines), lines
    capsys.readouterr()
    assert cli.main(["cache", "explain", "--shared", "ray://head", "--dir", str(cache_dir)]) == 0
    out = capsys.readouterr().out
    header = re.match(r"(\d+) lookups of the last session missed; set against (\d+) entries of ray://head:", out)
    assert header and int(header[1]) == missed and int(header[2]) >= 1, out
    assert "instead of" not in out, out  # every entry's signer is the cluster's secret, found as such


@pytest.mark.extended  # left out of CI's run (docs/testing.md): test_frames.py::test_a_changed_entry_is_never_loaded
def test_a_tampered_shared_entry_is_refused_and_recompiled(two_nodes: str, tmp_path: pathlib.Path) -> None:
    shared_dir = tmp_path / "shared"
    a_stats, a_out = compile_model(str(tmp_path / "local-a"), f"file://{shared_dir}")
    manifests = list(shared_dir.rglob("manifest.json"))
    assert len(manifests) > a_stats["jobs"]  # every kernel, and the compiled module
    for m in manifests:  # an attacker rewrites what an entry claims, without the secret
        m.write_text(m.read_text().replace('"label"', '"labelz"'))
    b_stats, b_out = on_other_node(two_nodes, str(tmp_path / "local-b"), f"file://{shared_dir}")
    assert b_stats["refused"] > a_stats["jobs"] and b_stats["jobs"] == a_stats["jobs"]
    assert b_stats["shared_hits"] == 0 and torch.equal(a_out, b_out)
