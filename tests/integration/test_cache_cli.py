"""``raycompile cache ACTION`` as a user runs it: ccache-style subcommands, each with its own
help; lasting counters and a lasting cap kept in the cache directory; one size syntax."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from raycompile.cache import Entry, FileTier
from raycompile.cache.usage import Usage
from raycompile.observe.stats import Stats

ACTIONS = ("stats", "zero-stats", "verify", "prune", "set-max-size", "clear", "export", "import")


def run(*args: str, secret: str = "s1", **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, RAYCOMPILE_SECRET=secret, **env)
    if "RAYCOMPILE_CACHE_MAX_BYTES" not in env:
        environ.pop("RAYCOMPILE_CACHE_MAX_BYTES", None)
    return subprocess.run([sys.executable, "-m", "raycompile", "cache", *args], capture_output=True, text=True,
                          env=environ, timeout=120, check=False)


def fill(root: pathlib.Path, n: int = 4) -> list[str]:
    tier = FileTier(str(root), b"s1")
    keys = [f"{i:02x}" * 32 for i in range(n)]
    for k in keys:
        tier.put(Entry(k, {"payload": os.urandom(2000)}))
    return keys


def held(root: pathlib.Path) -> tuple[int, int]:
    entries = FileTier(str(root), b"s1").entries()
    return len(entries), sum(size for _, size, _ in entries)


def test_stats_verify_prune_clear(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "c"
    keys = fill(root)
    stats = run("stats", "--dir", str(root))
    assert stats.returncode == 0 and "Entries:          4\n" in stats.stdout
    ok = run("verify", "--dir", str(root))
    assert ok.returncode == 0 and "verified 4 entries with RAYCOMPILE_SECRET: 4 ok, 0 signed with another secret, " \
                                  "0 corrupt" in ok.stdout
    blob = next(p for p in (root / "entries" / keys[1][:2] / keys[1]).iterdir() if p.name != "manifest.json")
    blob.write_bytes(b"garbage")
    bad = run("verify", "--dir", str(root))
    assert bad.returncode == 1 and f"CORRUPT {keys[1]}: corrupt" in bad.stdout
    other = run("verify", "--dir", str(root), secret="s2")  # entries another secret signed: told apart
    assert other.returncode == 1 and f"REFUSED {keys[0]}: signed with another secret" in other.stdout
    pruned = run("prune", "--max-size", "5K", "--dir", str(root))  # K: 1000, as ccache 4
    assert pruned.returncode == 0 and "evicted 1 entries; 3 remain" in pruned.stdout, pruned.stdout
    n, size = held(root)
    assert n == 3 and 4096 < size <= 5000
    assert run("prune", "--max-size", "4Ki", "--dir", str(root)).returncode == 0  # Ki: 1024
    assert 0 < held(root)[1] <= 4096
    assert run("clear", "--dir", str(root)).returncode == 0 and held(root) == (0, 0)


@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_has_its_own_help_with_an_example(action: str) -> None:
    proc = run(action, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: raycompile cache {action} ")
    assert "example" in proc.stdout and f"raycompile cache {action}" in proc.stdout.split("example", 1)[1]


@pytest.mark.parametrize("args,message", [
    ([], "required: ACTION"),
    (["frob"], "invalid choice: 'frob'"),
    (["stats", "extra"], "unrecognized arguments: extra"),
    (["clear", "--all"], "unrecognized arguments: --all"),
    (["export"], "required: FILE"),
    (["import", "a.tar.gz", "b.tar.gz"], "unrecognized arguments: b.tar.gz"),
    (["set-max-size"], "required: SIZE"),
    (["set-max-size", "5X"], "'5X' is not a size: expected a size such as"),
    (["prune", "--max-size", "lots"], "'lots' is not a size: expected a size such as"),
    (["zero-stats", "--shared", "file:///tmp/x"], "unrecognized arguments: --shared"),
    (["stats", "--shared", "redis://x:1"], "only a file:///path tier"),
    (["prune", "--shared", "file:///tmp/nowhere"], "prune --shared needs --max-size"),
])
def test_usage_errors_exit_2(args: list[str], message: str, tmp_path: pathlib.Path) -> None:
    proc = run(*args, *(["--dir", str(tmp_path / "c")] if args else []))
    assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "c" / "entries").exists()


def test_stats_shows_what_sessions_recorded_and_zero_stats_resets_it(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "c"
    fill(root, 2)
    session = Stats()
    session.add(local_hits=6, shared_hits=2, misses=2, corrupt=1, refused=3, jobs=2, shared_unavailable=1,
                bytes_read=4000, compile_seconds=1.5)
    Usage(str(root)).record(session.snapshot())  # what a session adds when it closes
    Usage(str(root)).record({"misses": 2, "put_errors": 1})
    text = run("stats", "--dir", str(root)).stdout
    for line in (f"Cache directory:  {root} (local tier)", "Entries:          2",
                 "Hits:             8 / 12 lookups (66.7%)", "  local:          6", "  shared:         2",
                 "Misses:           4 / 12 lookups (33.3%)", "Corrupt:          1 ", "Refused:          3 ",
                 "Errors:           2 (shared tier unreachable: 1, failed writes: 1)", "Stats zeroed:     never"):
        assert line in text, (line, text)
    assert "Cache size:       4." in text and "of 10.7 GB (0.0%), cap from default" in text
    report = json.loads(run("stats", "--json", "--dir", str(root)).stdout)
    assert (report["hits"], report["misses"], report["lookups"], report["hit_rate"]) == (8, 4, 12, 0.6667)
    assert report["entries"] == 2 and report["counters"]["refused"] == 3 and report["max_bytes"] == 10 * 2**30
    assert run("zero-stats", "--dir", str(root)).returncode == 0
    after = json.loads(run("stats", "--json", "--dir", str(root)).stdout)
    assert after["hits"] == 0 and after["hit_rate"] is None and after["zeroed_at"] is not None
    assert after["entries"] == 2  # zeroing the counters leaves the entries alone
    assert "Stats zeroed:     never" not in run("stats", "--dir", str(root)).stdout


def test_set_max_size_is_a_lasting_cap_that_prune_and_stats_use(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "c"
    fill(root)
    capped = run("set-max-size", "5K", "--dir", str(root))
    assert capped.returncode == 0 and "to 5.0 kB" in capped.stdout and "it holds 9." in capped.stdout
    assert Usage(str(root)).max_bytes() == 5000  # kept in the cache dir, for the sessions to use
    assert "of 5.0 kB (18" in run("stats", "--dir", str(root)).stdout  # over the cap until pruned
    pruned = run("prune", "--dir", str(root))
    assert pruned.returncode == 0 and "evicted 2 entries; 2 remain" in pruned.stdout
    assert "(set-max-size)" in pruned.stdout
    assert held(root)[1] <= 5000
    assert Usage(str(root)).read()["evictions"] == 2  # prune counts what it evicted
    # the environment wins, as a session's settings do
    env = run("stats", "--json", "--dir", str(root), RAYCOMPILE_CACHE_MAX_BYTES="3000")
    assert json.loads(env.stdout)["max_bytes"] == 3000
    assert json.loads(env.stdout)["max_bytes_from"] == "RAYCOMPILE_CACHE_MAX_BYTES"
    noted = run("set-max-size", "1Gi", "--dir", str(root), RAYCOMPILE_CACHE_MAX_BYTES="3000")
    assert noted.returncode == 0 and "wins over this cap" in noted.stderr and Usage(str(root)).max_bytes() == 2**30
    # 0: no cap, as ccache -M 0
    assert "none (no cap)" in run("set-max-size", "0", "--dir", str(root)).stdout
    assert "no size cap (set-max-size): nothing to prune" in run("prune", "--dir", str(root)).stdout
    assert json.loads(run("stats", "--json", "--dir", str(root)).stdout)["max_bytes"] is None
    assert held(root)[0] == 2


def test_shared_file_tier(tmp_path: pathlib.Path) -> None:
    shared = tmp_path / "nfs"
    fill(shared, 3)
    url = f"file://{shared}"
    text = run("stats", "--shared", url, "--dir", str(tmp_path / "c")).stdout
    assert f"{shared} (shared tier)" in text and "Entries:          3" in text and "counted per local" in text
    assert run("verify", "--shared", url, "--dir", str(tmp_path / "c")).returncode == 0
    pruned = run("prune", "--max-size", "3K", "--shared", url, "--dir", str(tmp_path / "c"))
    assert pruned.returncode == 0 and "evicted 2 entries" in pruned.stdout and held(shared)[0] == 1


@pytest.mark.parametrize("action", ["stats", "verify", "prune", "clear", "export", "import"])
def test_a_shared_tier_that_does_not_exist_is_an_error(action: str, tmp_path: pathlib.Path) -> None:
    """A typo in the path, or a file system not mounted here, is not an empty tier: exit 2, the
    path named, and what to do; nothing is created there."""
    gone = tmp_path / "no" / "such" / "dir"
    extra = {"prune": ["--max-size", "1G"], "export": [str(tmp_path / "a.tar.gz")],
             "import": [str(tmp_path / "a.tar.gz")]}.get(action, [])
    proc = run(action, *extra, "--shared", f"file://{gone}", "--dir", str(tmp_path / "c"))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"raycompile: --shared 'file://{gone}': {gone} is no directory" in proc.stderr, proc.stderr
    assert f"mkdir -p {gone}" in proc.stderr and "Traceback" not in proc.stderr
    assert not gone.exists() and proc.stdout == ""


def test_a_shared_tier_this_user_cannot_read_is_an_error(tmp_path: pathlib.Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every directory: the permission case needs an ordinary user")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    try:
        proc = run("stats", "--shared", f"file://{locked}", "--dir", str(tmp_path / "c"))
    finally:
        locked.chmod(0o700)
    assert proc.returncode == 2 and "cannot read" in proc.stderr, proc.stderr


def test_export_import_to_an_air_gapped_cluster(tmp_path: pathlib.Path) -> None:
    src, dst, archive = tmp_path / "src", tmp_path / "dst", tmp_path / "cache.tar.gz"
    keys = fill(src, 3)
    assert run("export", str(archive), "--dir", str(src)).returncode == 0
    imported = run("import", str(archive), "--dir", str(dst))
    assert imported.returncode == 0 and "imported 3 entries (0 refused" in imported.stdout
    assert all(isinstance(FileTier(str(dst), b"s1").get(k), Entry) for k in keys)
    other = run("import", str(archive), "--dir", str(tmp_path / "other"), secret="another-cluster")
    assert other.returncode == 1 and "imported 0 entries (3 refused" in other.stdout
    empty = run("export", str(tmp_path / "empty.tar.gz"), "--dir", str(tmp_path / "nothing-yet"))
    assert empty.returncode == 0 and "exported 0 entries" in empty.stdout


def test_missing_or_unwritable_archives_exit_2(tmp_path: pathlib.Path) -> None:
    proc = run("import", str(tmp_path / "missing.tar.gz"), "--dir", str(tmp_path))
    assert proc.returncode == 2 and "cannot import" in proc.stderr
    fill(tmp_path / "c", 1)
    proc = run("export", str(tmp_path / "no-such-dir" / "a.tar.gz"), "--dir", str(tmp_path / "c"))
    assert proc.returncode == 2 and "cannot export" in proc.stderr and "Traceback" not in proc.stderr
