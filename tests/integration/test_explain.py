"""A miss is explained (issue 32): a node compiles what another already compiled, and
``raycompile.explain()`` / ``raycompile explain`` name the part of the key that differs from the
nearest entry of the shared tier. Real sessions one after another in this process, each with an
empty local cache dir of its own and one ``file://`` shared tier, real CPU compiles in Inductor's
own workers (no Ray); the parts that differ are made to differ for real: the kernel's source, an
Inductor option, the signing secret."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

import raycompile
from raycompile.wrapper import compat

pytestmark = pytest.mark.slow  # five real compiles


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + torch.cos(x).sum()


def g(x: torch.Tensor) -> torch.Tensor:  # f's ops, another constant: kernels of the same names
    return torch.sin(x) * 3 + torch.cos(x).sum()


X = torch.linspace(-3, 3, 257)


def node(tmp: pathlib.Path, name: str, shared: str, fn: Callable[..., Any]) -> tuple[dict[str, Any], list[str]]:
    """A session as a fresh node runs it: its own empty cache dirs (raycompile's and Inductor's),
    the shared tier; stats, explain()."""
    raycompile.enable(cache_dir=str(tmp / name), shared_cache=shared, address="", compile_jobs="local")
    try:
        torch._dynamo.reset()
        with compat.fresh_cache():
            torch.testing.assert_close(torch.compile(fn)(X), fn(X))
    finally:
        raycompile.disable()
    return raycompile.stats(), raycompile.explain()


def test_each_miss_names_the_part_of_the_key_that_differs(tmp_path: pathlib.Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config

    shared = f"file://{tmp_path / 'shared'}"
    a, explained = node(tmp_path, "a", shared, f)
    assert a["jobs_local"] > 0 and a["dynamo_misses"] == 1
    # each missed an empty tier; the entry there now is the one the session wrote
    assert len(explained) == a["jobs_local"] + 1, explained
    assert all("held no other entry of this kind (the one there now was written after" in line
               for line in explained), explained

    warm, explained = node(tmp_path, "warm", shared, f)
    assert warm["dynamo_hits"] == 1 and warm["jobs_local"] == 0 and explained == [], (warm, explained)

    # the same kernels' names from another source: each kernel's source, and the function, differ
    b, explained = node(tmp_path, "b", shared, g)
    assert b["jobs_local"] > 0, b
    kernels = [line for line in explained if line.startswith("cpp_")]
    assert kernels and all("the kernel's source differs from the nearest entry," in line for line in kernels), explained
    frames = [line for line in explained if line.startswith("compiled frames of")]
    assert len(frames) == 1 and "the function" in frames[0] and "another kernel or function" in frames[0], frames

    # an Inductor option: the compiled frame's key holds Inductor's config
    with config.patch(epilogue_fusion=False):
        c, explained = node(tmp_path, "c", shared, f)
    frames = [line for line in explained if line.startswith("compiled frames of")]
    assert len(frames) == 1 and "Inductor's config" in frames[0] and "another" not in frames[0], explained

    # another secret: every entry is refused, and said to be signed with another secret
    monkeypatch.setenv("RAYCOMPILE_SECRET", "another-secret")
    d, explained = node(tmp_path, "d", shared, f)
    assert d["refused"] > 0 and d["dynamo_misses"] == 1, d
    assert explained and all("signed with a secret not known here" in line for line in explained), explained

    # the CLI, in another process, from the misses the last session kept in its cache dir: it
    # knows this user's key, which signs the entries
    proc = subprocess.run([sys.executable, "-m", "raycompile", "explain", "--dir", str(tmp_path / "d"),
                           "--shared", shared, "--json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAYCOMPILE_SECRET": "another-secret"}, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(proc.stdout)
    assert len(rows) == len(explained) and all(r["signer"] == "this user's key" for r in rows), rows
    assert all("signed with this user's key instead of RAYCOMPILE_SECRET" in r["reason"] for r in rows), rows


def test_the_cli_explains_against_a_redis_tier(tmp_path: pathlib.Path, redis_url: str) -> None:
    """``raycompile explain --shared redis://...``: the misses of a node that compiled another
    source, set against the entries another node wrote to a real Redis; an unreachable Redis is
    an error (exit 2), never an empty tier."""
    import redis

    redis_url = redis_url.replace("/0", "/14")  # a database of its own, emptied: no other test's entries are nearer
    redis.Redis.from_url(redis_url).flushdb()
    a, _ = node(tmp_path, "a", redis_url, f)
    b, explained = node(tmp_path, "b", redis_url, g)
    assert a["jobs_local"] > 0 and b["jobs_local"] > 0 and explained, (a, b)
    proc = subprocess.run([sys.executable, "-m", "raycompile", "explain", "--dir", str(tmp_path / "b"),
                           "--shared", redis_url, "--json"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(proc.stdout)
    kernels = [r for r in rows if r["label"].startswith("cpp_")]
    assert len(rows) == len(explained) and kernels, rows
    assert all("the kernel's source differs from the nearest entry," in r["reason"] for r in kernels), kernels
    down = subprocess.run([sys.executable, "-m", "raycompile", "explain", "--dir", str(tmp_path / "b"),
                           "--shared", "redis://127.0.0.1:1/0"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert down.returncode == 2 and "Redis at redis://127.0.0.1:1/0 does not answer" in down.stderr, down.stderr
