"""What an operator sees: the trace, the summary, the progress bar's manners, the backend entry point."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import raycompile
from raycompile.models import examples
from raycompile.wrapper import compat


def test_trace_has_one_slice_per_job_and_summary_matches_stats(local_ray: None, tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "trace.json"
    model, args = examples()["convnet_bn"]
    raycompile.enable(trace=str(trace))
    try:
        torch._dynamo.reset()
        with compat.fresh_cache():
            torch.compile(model)(*args)
            # disable also lowers the backward this training graph never ran (so its compiled
            # frames are complete): inside the fresh cache, its kernels are always jobs of the
            # session too, never found in Inductor's cache by the luck of earlier tests
            raycompile.disable()
    finally:
        raycompile.disable()
    # the session's whole record, as the trace (written at disable) has it
    s = raycompile.stats()
    text = raycompile.report()
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == s["jobs"] > 0
    assert all(e["dur"] > 0 and e["ts"] >= 0 and e["cat"] == "compiled" and e["name"] for e in slices)
    # on CPU every job is a C++ kernel: named as in the output module, not by its library's hash
    assert all(e["name"].startswith("cpp_fused_") for e in slices), [e["name"] for e in slices]
    assert len(slices) <= 10 and all(f"compiled   {e['name'][:90]}" in text for e in slices), text
    tracks = {(e["pid"], e["tid"]) for e in slices}
    named_threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert tracks == named_threads and len({e["pid"] for e in slices}) == len(s["nodes"])
    assert (f"jobs {s['jobs']}   deduped {s['deduped']}   retried {s['retried']}   "
            f"fallbacks {s['fallbacks']}   failures {s['failures']}") in text
    assert f"compile seconds (summed over jobs) {s['compile_seconds']:.1f}" in text
    assert raycompile.report() == text  # after disable, the last session's summary, unchanged


SCRIPT = """
import pytest
import torch
from raycompile.models import examples
model, args = examples()["reduction_tail"]
print("out", torch.compile(model, backend="raycompile")(*args).shape)  # no raycompile import
import raycompile
print("jobs", raycompile.stats()["jobs"])
raycompile.disable()
"""


def _run(env_extra: dict[str, str], tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), RAYCOMPILE_NUM_CPUS="2",
               **env_extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def test_backend_entry_point_and_no_progress_when_not_a_terminal(tmp_path: pathlib.Path) -> None:
    proc = _run({}, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = int(proc.stdout.split("jobs ")[1].split()[0])
    assert jobs > 0  # the backend enabled the farm by itself
    assert "compiling kernels" not in proc.stdout + proc.stderr  # stdout is a pipe: quiet


@pytest.mark.slow  # a fresh process with an embedded Ray (the bar's manners: tests/unit/test_output_runtime.py)
@pytest.mark.extended  # left out of CI's run (docs/testing.md): the bar's manners are unit-tested
def test_progress_can_be_forced(tmp_path: pathlib.Path) -> None:
    proc = _run({"RAYCOMPILE_PROGRESS": "1"}, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "raycompile: compiling kernels" in proc.stdout


SERVED = """
import json, torch, raycompile
raycompile.enable(compile_jobs="local", dynamo_cache=False)
f = torch.compile(lambda x: (x.sin() * 2).sum(-1))
f(torch.randn(8, 16))
raycompile.disable()
KEYS = ("torch_", "jobs", "kernel_misses", "misses", "deduped", "dedupe_cluster", "fallbacks")
print("STATS " + json.dumps({k: v for k, v in raycompile.stats().items() if k.startswith(KEYS)}))
print(raycompile.report())
"""


def test_a_warm_process_on_the_node_that_compiled_says_what_served_it(tmp_path: pathlib.Path) -> None:
    """Inductor's own cache answers a warm process on the node that compiled before raycompile's
    tiers are asked: stats() and report() say so, instead of all zeros."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               RAYCOMPILE_CACHE_DIR=str(tmp_path / "raycompile"), RAYCOMPILE_NUM_CPUS="2")
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", SERVED], capture_output=True, text=True, env=env,
                              timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        stats = json.loads(proc.stdout.split("STATS ", 1)[1].splitlines()[0])
        runs.append((stats, proc.stdout))
    (cold, _), (warm, report) = runs
    assert cold["torch_autograd_misses"] >= 1 and cold["torch_autograd_hits"] == 0, cold
    assert cold["jobs_local"] >= 1, cold
    assert warm["torch_autograd_hits"] >= 1 and warm["torch_autograd_misses"] == 0, warm
    assert warm["jobs"] == warm["jobs_local"] == 0, warm
    line = next(line for line in report.splitlines() if "served by" in line)
    assert f"AOTAutograd/FX-graph caches {warm['torch_autograd_hits']}/" in line and "lowered here 0" in line, line
    # the kernels that missed every tier reconcile with where they were compiled (``misses`` also
    # counts the output modules' and graphs' own lookups, so it is larger)
    compiled = sum(cold[k] for k in ("jobs", "deduped", "jobs_local", "dedupe_cluster", "fallbacks"))
    assert cold["kernel_misses"] == compiled >= 1 and cold["misses"] > cold["kernel_misses"], cold
    assert f"kernels no tier had {cold['kernel_misses']}: farm jobs 0" in runs[0][1], runs[0][1]
    assert warm["kernel_misses"] == 0 and "kernels no tier had" not in report, warm
