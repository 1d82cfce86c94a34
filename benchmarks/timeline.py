"""Where a sampled process's main thread spent its time, in order, and what it waited on.

    python benchmarks/timeline.py FILE.json [--thread MainThread] [--min 0.3] [--top 12]

FILE is a ``py-spy record --threads --idle -f speedscope`` profile (``overhead.py --sample``,
``max_autotune.py --sample``). Each sample of the thread is put in a phase by the innermost
frame of the compile that it is in (build, Dynamo, AOTAutograd, lowering, scheduling, codegen,
loading the output module, the first run); a sample whose innermost frame blocks (a lock, a
future, a subprocess, a sleep) is a wait, named by the frames that led to it. Prints the phases
as a timeline (consecutive samples of one phase merged; runs shorter than ``--min`` seconds folded
into their neighbours), seconds per phase, and the places the thread waited longest.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from typing import Any

# (phase, substrings of "file:function" of a frame that puts a sample in it); the innermost match wins
PHASES = (
    ("imports", ("<frozen importlib._bootstrap>:_find_and_load",)),
    ("build", ("overhead.py:build", "max_autotune.py:build", "ranks.py:build")),
    ("enable", ("raycompile/__init__.py:enable", "__init__.py:enable")),
    ("dynamo", ("convert_frame.py:_compile",)),
    ("aot_autograd", ("aot_autograd.py:aot_module_simplified", "aot_autograd.py:create_aot_dispatcher_function")),
    ("inductor", ("compile_fx.py:compile_fx_inner", "compile_fx.py:_compile_fx_inner")),
    ("lowering", ("graph.py:run",)),
    ("scheduling", ("scheduler.py:__init__",)),
    ("codegen", ("graph.py:codegen", "graph.py:_codegen")),
    ("module_load", ("graph.py:compile_to_module", "graph.py:_compile_to_module")),
    ("autotune", ("select_algorithm.py:__call__",)),
    ("first_run", ("output_code.py:__call__", "triton_heuristics.py:run")),
    ("backward", ("graph.py:backward", "autograd/__init__.py:backward", "_tensor.py:backward")),
    # max-autotune: template choices timed at compile time, a kernel's configs and coordinate descent at its first run
    ("autotune_timings", ("select_algorithm.py:benchmark_choices", "select_algorithm.py:benchmark_example_value",
                          "select_algorithm.py:do_autotuning")),
    ("config_tuning", ("triton_heuristics.py:autotune_to_one_config", "triton_heuristics.py:benchmark_all_configs")),
    ("coordesc", ("triton_heuristics.py:coordinate_descent_tuning",)),
    ("graph_wait", ("graph_compiles.py:_wait", "graph_compiles.py:wait")),
    # a warm node's compiled frames (wrapper/frames.py), read and installed inside torch.compile
    ("frames_load", ("frames.py:", "package.py:load")),
    # a rank waiting for its job's owner (single flight: wrapper/flights.py)
    ("flight_serve", ("flights.py:serve",)),
)
BLOCKING = ("wait", "_wait_for_tstate_lock", "acquire", "result", "sleep", "select", "poll", "waitpid",
            "_try_wait", "recv", "recv_into", "read", "readinto", "_recv", "join", "get", "_communicate",
            "communicate", "accept", "epoll", "wait_for")


def sampled(py_spy: str, out: str, cmd: list[str]) -> list[str]:
    """``cmd`` run under py-spy, writing the profile this script reads to ``out``: every thread,
    waits included, 100 samples a second, without pausing the process. With ``SAMPLE_GIL=1`` in
    the environment, only the thread holding the GIL at each sample (``--gil``): which threads take
    it from the compile (``--gil-threads`` prints each thread's share)."""
    import os

    which = "--gil" if os.environ.get("SAMPLE_GIL") == "1" else "--idle"
    return [py_spy, "record", "--threads", which, "--nonblocking", "-r", "100", "-f", "speedscope", "-o", out,
            "--", *cmd]


def gil_threads(doc: dict[str, Any]) -> list[tuple[str, float]]:
    """(thread, seconds holding the GIL) of a ``--gil`` profile, most first."""
    out = [(profile.get("name", "?"), len(profile.get("samples") or []) / 100.0) for profile in doc["profiles"]]
    return sorted(out, key=lambda t: -t[1])  # 100 samples a second (sampled)


def frame_key(f: dict[str, Any]) -> str:
    """"file.py:function" (py-spy names methods Class.method: the method's name is kept)."""
    path = f.get("file") or ""
    return f"{path.rsplit('/', 1)[-1]}:{f.get('name', '').rsplit('.', 1)[-1]}"


def classify(stack: list[dict[str, Any]]) -> tuple[str, bool, str]:
    """(phase, waiting, where): stack is outermost first."""
    keys = [frame_key(f) for f in stack]
    phase = "other"
    for key in keys:  # outermost to innermost: the last match is the innermost phase
        for name, subs in PHASES:
            if any(key.startswith(s) or s in key for s in subs):
                phase = name
    inner = stack[-1].get("name", "").rsplit(".", 1)[-1] if stack else ""
    waiting = inner in BLOCKING or inner.startswith(("wait", "_wait"))
    # the wait named by the innermost frames outside the stdlib's threading/futures/subprocess
    where = ""
    if waiting:
        skip = ("threading.py", "_base.py", "subprocess.py", "thread.py", "selectors.py", "queues.py",
                "connection.py", "process.py", "socket.py")
        outside = [k for k in keys if k.split(":")[0] not in skip and k != ":" and not k.startswith(":thread")]
        where = " < ".join(reversed(outside[-3:]))
    return phase, waiting, where


def load(path: str, thread: str) -> tuple[list[tuple[str, bool, str, float]], list[str]]:
    doc = json.load(open(path))
    frames = doc["shared"]["frames"]
    names = [p["name"] for p in doc["profiles"]]
    profile = next((p for p in doc["profiles"] if f'"{thread}"' in p["name"]), None)
    if profile is None and thread == "MainThread":
        # py-spy sometimes reads no name for it: the main thread is the process's first (lowest id)
        ids = {int(m.group(1)): p for p in doc["profiles"] if (m := re.match(r"Thread (\d+)", p["name"]))}
        profile = ids[min(i for i in ids if i > 0)] if any(i > 0 for i in ids) else None
    if profile is None:
        sys.exit(f"no thread {thread!r} in {path}: {names}")
    out = []
    for sample, weight in zip(profile["samples"], profile["weights"]):
        stack = [frames[i] for i in sample]  # speedscope: root first, leaf last
        phase, waiting, where = classify(stack)
        out.append((phase, waiting, where, float(weight)))
    return out, names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--thread", default="MainThread")
    p.add_argument("--min", type=float, default=0.3, help="fold runs shorter than this (seconds)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--gil-threads", action="store_true",
                   help="a SAMPLE_GIL=1 profile: each thread's seconds holding the GIL, and nothing else")
    a = p.parse_args()
    if a.gil_threads:
        with open(a.file) as f:
            for name, seconds in gil_threads(json.load(f)):
                print(f"{seconds:8.2f} s  {name}")
        return
    samples, threads = load(a.file, a.thread)
    total = sum(w for *_, w in samples)
    print(f"{a.file}: thread {a.thread}, {len(samples)} samples, {total:.1f} s; {len(threads)} threads sampled")
    # timeline: runs of one (phase, waiting)
    runs: list[list[Any]] = []
    t = 0.0
    for phase, waiting, _where, w in samples:
        label = f"{phase}{' (waiting)' if waiting else ''}"
        if runs and runs[-1][0] == label:
            runs[-1][2] += w
        else:
            runs.append([label, t, w])
        t += w
    merged: list[list[Any]] = []
    for label, start, dur in runs:
        if merged and (dur < a.min or merged[-1][0] == label):
            merged[-1][2] += dur
            continue
        merged.append([label, start, dur])
    print("\ntimeline (runs under --min folded into the one before):")
    for label, start, dur in merged:
        print(f"  {start:7.2f} s  +{dur:6.2f} s  {label}")
    per: collections.Counter[str] = collections.Counter()
    waits: collections.Counter[str] = collections.Counter()
    for phase, waiting, where, w in samples:
        per[f"{phase}{' (waiting)' if waiting else ''}"] += w
        if waiting:
            waits[f"[{phase}] {where}"] += w
    print("\nseconds per phase:")
    for label, s in per.most_common():
        print(f"  {s:7.2f}  {label}")
    print(f"\nwhere it waited longest (top {a.top}):")
    for where, s in waits.most_common(a.top):
        print(f"  {s:7.2f}  {where}")


if __name__ == "__main__":
    main()
