"""Several Ray nodes on one machine (ray.cluster_utils.Cluster): a CPU-only compile node and a
node with a fake GPU resource. Compile jobs ask for no GPU and spread over both."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import torch
from farmrun import compile_fresh, compile_on_farm
from raystart import ray_cluster

from raycompile.kernels import Built
from raycompile.models import examples
from raycompile.orchestrator import Farm
from raycompile.settings import Settings
from raycompile.wrapper import compat
from raycompile.wrapper.job_keys import triton_job
from raycompile.wrapper.kernel_sources import find_kernels

pytestmark = pytest.mark.slow  # a two-node cluster; a model and corpus kernels compiled across it


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[object]:
    # a GPU node, minus the GPU
    with ray_cluster({"num_cpus": 1, "num_gpus": 1, "resources": {"fake_gpu_node": 1}}) as cluster:
        yield cluster


# extended (docs/testing.md, stop 60): jobs on a worker node in test_reliability.py's node removed mid-run
@pytest.mark.extended
def test_model_compile_jobs_spread_over_both_nodes(two_nodes: object) -> None:
    model, args = examples()["transformer_block"]
    stock = compile_fresh(model, args)
    # the default placement: the cluster has CPUs beyond the driver's node, so jobs go to Ray
    out, s = compile_on_farm(model, args, address="auto", compile_jobs="auto")
    assert torch.equal(out, stock)
    assert len(s["nodes"]) == 2 and s["jobs"] == sum(s["nodes"].values()) and s["jobs_local"] == 0


def test_cross_compile_on_both_nodes(two_nodes: object, corpus: pathlib.Path) -> None:
    sources = [k for k in find_kernels([str(corpus)]) if "triton_heuristics.template" not in k.source][:8]
    with Farm(Settings.resolve(address="auto"), toolchain=compat.TOOLCHAIN) as farm:
        assert len(farm.nodes) == 2
        results = [f.result(timeout=300) for f in
                   [farm.submit(triton_job(k.name, k.source)) for k in sources]]
        assert all(isinstance(r, Built) for r in results)
        assert len({r.node_id for r in results}) == 2
