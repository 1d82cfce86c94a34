"""``raycompile cache`` as a user runs it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from raycompile.cache import Entry, FileTier


def run(*args: str, secret: str = "s1") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RAYCOMPILE_SECRET=secret)
    return subprocess.run([sys.executable, "-m", "raycompile", "cache", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def fill(root: pathlib.Path, n: int = 4) -> list[str]:
    tier = FileTier(str(root), b"s1")
    keys = [f"{i:02x}" * 32 for i in range(n)]
    for k in keys:
        tier.put(Entry(k, {"payload": os.urandom(2000)}))
    return keys


def test_stats_verify_prune_clear(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "c"
    keys = fill(root)
    assert "4 entries" in run("stats", "--dir", str(root)).stdout
    ok = run("verify", "--dir", str(root))
    assert ok.returncode == 0 and "verified 4 entries: 0 bad" in ok.stdout
    blob = next(p for p in (root / "entries" / keys[1][:2] / keys[1]).iterdir() if p.name != "manifest.json")
    blob.write_bytes(b"garbage")
    bad = run("verify", "--dir", str(root))
    assert bad.returncode == 1 and f"BAD {keys[1]}: corrupt" in bad.stdout
    pruned = run("prune", "--max-size", "5K", "--dir", str(root))
    left = FileTier(str(root), b"s1").entries()
    assert pruned.returncode == 0 and "evicted 1 entries" in pruned.stdout
    assert len(left) == 3 and sum(size for _, size, _ in left) <= 5 * 1024
    assert run("clear", "--dir", str(root)).returncode == 0 and FileTier(str(root), b"s1").entries() == []


def test_export_import_to_an_air_gapped_cluster(tmp_path: pathlib.Path) -> None:
    src, dst, archive = tmp_path / "src", tmp_path / "dst", tmp_path / "cache.tar.gz"
    keys = fill(src, 3)
    assert run("export", str(archive), "--dir", str(src)).returncode == 0
    imported = run("import", str(archive), "--dir", str(dst))
    assert imported.returncode == 0 and "imported 3 entries (0 refused" in imported.stdout
    assert all(isinstance(FileTier(str(dst), b"s1").get(k), Entry) for k in keys)
    other = run("import", str(archive), "--dir", str(tmp_path / "other"), secret="another-cluster")
    assert other.returncode == 1 and "imported 0 entries (3 refused" in other.stdout


def test_bad_input_exits_2(tmp_path: pathlib.Path) -> None:
    for args, message in ((["prune", "--max-size", "lots"], "expected a size"), (["prune"], "needs --max-size"),
                          (["export"], "needs a FILE"), (["stats", "--shared", "redis://x:1"], "only a file:///")):
        proc = run(*args, "--dir", str(tmp_path))
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
    proc = run("import", str(tmp_path / "missing.tar.gz"), "--dir", str(tmp_path))
    assert proc.returncode == 2 and "cannot import" in proc.stderr
