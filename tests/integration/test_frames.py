"""Compiled frames shared through the tiers (on by default): a CPU model with a graph break is
compiled in one process, then warm-started in NEW processes (each with its own empty raycompile
and Inductor cache dirs, the same ``file://`` shared tier, joined with no address to the `ray
start` cluster of this machine, with Ray's token authentication: the cluster's secret signs the
entries, nothing configured):

- the warm process traces nothing (raycompile's count and Dynamo's own), runs no job, and
  computes bitwise the loss and gradients of the process that compiled; it never starts Ray
  (not even imports it: the cluster's secret comes from a probe process) nor waits for it, and
  imports none of Inductor's lowering, scheduler or codegen;
- another batch size (a guard miss on the loaded frames) is traced and compiled, bitwise equal to
  stock Inductor in the same process, and written as the next generation, which a later process
  loads with both shapes;
- an entry whose bytes were changed in the shared tier is never unpickled: counted corrupt, traced.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import procs
import pytest
import torch
from raystart import RayHead, ray_head, short_tmpdir

pytestmark = pytest.mark.slow  # five compiling subprocesses

DRIVER = pathlib.Path(__file__).with_name("frames_driver.py")


HEADS: dict[str, RayHead] = {}  # the cluster fixture's head, by its RAY_TMPDIR


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `ray start` head that is this machine's current cluster for processes whose RAY_TMPDIR
    is the directory yielded (Ray's defaults: token authentication on)."""
    with short_tmpdir() as tmpdir, ray_head(num_cpus=2, dashboard=False, ray_tmpdir=tmpdir) as head:
        HEADS[tmpdir] = head
        yield tmpdir
        HEADS.pop(tmpdir)


def start(ray_tmpdir: str, shared: str, where: pathlib.Path, batch: int,
          stock: bool = False, by_address: bool = False) -> Callable[[], dict[str, Any]]:
    """A new process with empty local caches of its own (``where``), joining the machine's
    cluster with no address (``by_address``: by RAY_ADDRESS, with Ray's RAY_AUTH_MODE=token for
    an explicit address), started now; what this returns waits for the driver's results."""
    out = where / "out.pt"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton"),
           "RAY_TMPDIR": ray_tmpdir}
    for name in ("RAYCOMPILE_SECRET", "RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(name, None)
    if by_address:
        head = HEADS[ray_tmpdir]
        # the default compile_jobs (the suite's autouse fixture sets "cluster" for the test's own processes)
        env.update({"RAY_ADDRESS": head.address, "RAYCOMPILE_COMPILE_JOBS": "auto", **head.driver_env})
    args = ["", shared, str(where / "raycompile"), str(out), str(batch)] + (["stock"] if stock else [])
    return procs.start(DRIVER, args, env, out, timeout=600)


def run(ray_tmpdir: str, shared: str, where: pathlib.Path, batch: int, stock: bool = False,
        by_address: bool = False) -> dict[str, Any]:
    return start(ray_tmpdir, shared, where, batch, stock, by_address)()


@pytest.fixture(scope="module")
def cold(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, Any]]:
    """One cold process's shared tier (a directory) and results; each test works on a copy."""
    where = tmp_path_factory.mktemp("cold")
    return where / "shared", run(cluster, f"file://{where / 'shared'}", where / "a", 8)


def copy_of(cold: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path) -> pathlib.Path:
    shutil.copytree(cold[0], tmp_path / "shared")
    return tmp_path / "shared"


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_compiled_frames_warm_start_another_process(cluster: str, cold: tuple[pathlib.Path, dict[str, Any]],
                                                    tmp_path: pathlib.Path) -> None:
    shared = f"file://{copy_of(cold, tmp_path)}"
    cold = cold[1]
    s = cold["stats"]
    assert s["dynamo_misses"] == 1 and s["dynamo_frames_traced"] == 2 and s["dynamo_published"] == 1, s
    assert s["jobs"] + s["jobs_local"] > 0 and cold["torch_traced"] == 2

    warm = run(cluster, shared, tmp_path / "b", 8)
    w = warm["stats"]
    # no Dynamo trace (raycompile's count and Dynamo's own), no AOTAutograd, no compile job
    assert w["dynamo_hits"] == 1 and w["dynamo_frames_loaded"] == 2 and w["dynamo_frames_traced"] == 0, w
    assert warm["torch_traced"] == 0
    assert w["jobs"] == 0 and w["jobs_local"] == 0 and w["fallbacks"] == 0 and w["shared_hits"] > 0, w
    assert w["dynamo_functions"] == {"__main__.Block.forward": {"loaded": 2, "traced": 0, "generation": 0}}
    assert equal(warm["result"], cold["result"])
    # every compile hit: Ray was never begun (nor imported), nothing waited for it (a lookup may
    # wait for the probe process's answer, counted apart: how long depends on the machine)
    assert "begun" not in w["ray_start_seconds"] and not w["ray_wait_seconds"] and not warm["ray_imported"], w
    # nor Inductor's lowering, scheduler or codegen: the loaded graphs need none of them
    assert warm["inductor_compile_modules"] == [], warm["inductor_compile_modules"]
    # and its loaded graphs run after disable() as in the session
    assert torch.equal(warm["after_disable"], warm["result"]["loss"])
    assert cold["inductor_compile_modules"], cold["inductor_compile_modules"]  # (the cold one compiled)
    # the cold one compiled in this node's workers, with no Ray either: the cluster it joined (by
    # this machine's current-cluster file) is this machine alone, as its probe found
    assert "begun" not in s["ray_start_seconds"] and s["jobs_local"] > 0 and s["jobs"] == 0, s

    # another batch size: the loaded frames' guards fail; traced, compiled, bitwise stock's. This
    # process names the cluster by RAY_ADDRESS: its one node has this machine's address, so it is
    # this machine alone too, and the compile begins no Ray
    other = run(cluster, shared, tmp_path / "c", 5, stock=True, by_address=True)
    o = other["stats"]
    assert o["dynamo_hits"] == 1 and o["dynamo_frames_loaded"] == 2 and o["dynamo_frames_traced"] == 2, o
    assert "begun" not in o["ray_start_seconds"] and o["jobs_local"] > 0 and o["jobs"] == 0, o
    assert o["dynamo_published"] == 1 and o["dynamo_invalid"] == 0, o
    assert equal(other["result"], other["stock"])
    assert not torch.equal(other["result"]["x"].sum(), cold["result"]["x"].sum())  # really another input

    # generation 1 holds both shapes: a new process loads it and traces neither (two at once)
    started = [(start(cluster, shared, tmp_path / f"d{batch}", batch), expected)
               for batch, expected in ((5, other["result"]), (8, cold["result"]))]
    for done, expected in started:
        again = done()
        a = again["stats"]
        assert a["dynamo_frames_loaded"] == 4 and a["dynamo_frames_traced"] == 0 and again["torch_traced"] == 0, a
        assert a["jobs"] == 0 and a["jobs_local"] == 0, a
        assert equal(again["result"], expected)


def test_a_changed_entry_is_never_loaded(cluster: str, cold: tuple[pathlib.Path, dict[str, Any]],
                                         tmp_path: pathlib.Path) -> None:
    shared_dir = copy_of(cold, tmp_path)
    cold = cold[1]
    assert cold["stats"]["dynamo_published"] == 1
    manifests = [m for m in shared_dir.rglob("manifest.json") if "compiled frames of" in m.read_text()]
    assert len(manifests) == 1
    blobs = [p for p in manifests[0].parent.iterdir() if p.name != "manifest.json"]
    for blob in blobs:  # the pickled entry, one byte changed (a pickle that would run other code)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    warm = run(cluster, f"file://{shared_dir}", tmp_path / "b", 8)
    w = warm["stats"]
    assert w["corrupt"] >= 1 and w["dynamo_hits"] == 0 and w["dynamo_invalid"] == 0, w
    assert w["dynamo_frames_traced"] == 2 and warm["torch_traced"] == 2, w
    assert equal(warm["result"], cold["result"])
