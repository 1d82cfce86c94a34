"""The local/file tier: signed, verified, atomic, repaired, evicted in LRU order."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import time

import pytest

from raycompile.cache import Entry, FileTier, Miss
from raycompile.cache.signing import derive, load_secret, user_key_file
from raycompile.cache.store import manifest_for

SECRET = b"s" * 32


def entry(key: str = "ab" * 32, size: int = 1000) -> Entry:
    return Entry(key, {"payload": os.urandom(size), "triton/G/k.cubin": b"\x7fELF" + os.urandom(size)},
                 {"label": "k"})


def blob_paths(tier: FileTier, key: str) -> list[pathlib.Path]:
    d = pathlib.Path(tier.root, "entries", key[:2], key)
    return [p for p in d.iterdir() if p.name != "manifest.json"]


def test_put_get_roundtrip(tmp_path: pathlib.Path) -> None:
    tier = FileTier(str(tmp_path), SECRET)
    e = entry()
    assert tier.put(e) == e.size
    got = tier.get(e.key)
    assert isinstance(got, Entry) and got.blobs == e.blobs and got.meta == e.meta
    assert tier.get("cd" * 32) == Miss("absent")


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "delete-manifest"])
def test_corruption_is_a_miss_then_repaired(tmp_path: pathlib.Path, damage: str) -> None:
    tier = FileTier(str(tmp_path), SECRET)
    e = entry()
    tier.put(e)
    blob = blob_paths(tier, e.key)[0]
    data = blob.read_bytes()
    if damage == "truncate":
        blob.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        blob.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    elif damage == "delete":
        blob.unlink()
    else:  # found by benchmarks/chaos.py: blobs left without their manifest blocked the repair
        (blob.parent / "manifest.json").unlink()
    miss = tier.get(e.key)
    assert isinstance(miss, Miss) and miss.reason == "corrupt"
    assert tier.put(e) == e.size  # the next write repairs it
    assert isinstance(tier.get(e.key), Entry)


def test_a_write_repairs_an_entry_left_without_its_manifest(tmp_path: pathlib.Path) -> None:
    """The head service stores raw entries and never calls get(): put_raw itself must repair."""
    tier = FileTier(str(tmp_path), SECRET)
    e = entry()
    tier.put(e)
    (blob_paths(tier, e.key)[0].parent / "manifest.json").unlink()
    assert tier.get_raw(e.key) is None
    assert tier.put_raw(e.key, manifest_for(e, SECRET), e.blobs) == e.size
    assert isinstance(tier.get(e.key), Entry)


def test_an_entry_signed_with_another_secret_is_refused(tmp_path: pathlib.Path) -> None:
    FileTier(str(tmp_path), b"attacker").put(entry())
    miss = FileTier(str(tmp_path), SECRET).get(entry().key)
    assert isinstance(miss, Miss) and miss.reason == "refused"


def test_a_shared_entry_of_another_secret_stays_for_its_owner_a_local_one_is_dropped(tmp_path: pathlib.Path) -> None:
    """Two clusters with different secrets on one shared tier must not delete each other's
    entries: the reader that refuses one leaves it (and cannot replace it); in the local tier,
    this user's own, a refused entry is dropped and the next write repairs it."""
    e = entry()
    FileTier(str(tmp_path / "shared"), b"cluster one", "shared").put(e)
    two = FileTier(str(tmp_path / "shared"), b"cluster two", "shared")
    assert two.get(e.key).reason == "refused" and two.put(e) == 0
    assert isinstance(FileTier(str(tmp_path / "shared"), b"cluster one", "shared").get(e.key), Entry)
    FileTier(str(tmp_path / "local"), b"old key", "local").put(e)
    mine = FileTier(str(tmp_path / "local"), SECRET, "local")
    assert mine.get(e.key).reason == "refused" and mine.put(e) == e.size and isinstance(mine.get(e.key), Entry)


def test_a_tampered_manifest_is_refused(tmp_path: pathlib.Path) -> None:
    tier = FileTier(str(tmp_path), SECRET)
    e = entry()
    tier.put(e)
    manifest = pathlib.Path(tier.root, "entries", e.key[:2], e.key, "manifest.json")
    manifest.write_text(manifest.read_text().replace('"label": "k"', '"label": "evil"'))
    assert tier.get(e.key) == Miss("refused", "bad or missing signature")


def test_lru_eviction_order(tmp_path: pathlib.Path) -> None:
    tier = FileTier(str(tmp_path), SECRET, max_bytes=10_000)
    keys = [f"{i:02d}" * 32 for i in range(4)]
    for i, k in enumerate(keys[:3]):
        tier.put(entry(k, 1500))  # ~3 KB an entry
        os.utime(pathlib.Path(tier.root, "entries", k[:2], k, "manifest.json"), (1000 + i, 1000 + i))
    assert isinstance(tier.get(keys[0]), Entry)  # touch the oldest: now most recently used
    tier.put(entry(keys[3], 1500))  # over the cap: the least recently used (keys[1]) goes
    assert tier.evictions >= 1
    assert tier.get(keys[1]) == Miss("absent")
    assert isinstance(tier.get(keys[0]), Entry) and isinstance(tier.get(keys[3]), Entry)


def _writer(root: str, key: str, seed: int) -> None:
    tier = FileTier(root, SECRET)
    for _ in range(20):
        tier.put(Entry(key, {"payload": bytes([seed]) * 5000, "x": os.urandom(100)}))


def test_eight_processes_same_and_different_keys(tmp_path: pathlib.Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    keys = ["aa" * 32] * 4 + [f"{i:02x}" * 32 for i in range(4)]
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), k, i)) for i, k in enumerate(keys)]
    for p in procs:
        p.start()
    tier = FileTier(str(tmp_path), SECRET)
    deadline = time.monotonic() + 60
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        got = tier.get("aa" * 32)  # a reader never sees a partial entry
        assert isinstance(got, Entry) or got.reason == "absent"
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for k in set(keys):
        got = tier.get(k)
        assert isinstance(got, Entry) and len(set(got.blobs["payload"])) == 1
    leftovers = [p for p in pathlib.Path(tmp_path).rglob("*") if ".tmp-" in p.name or ".trash-" in p.name]
    assert leftovers == []


def test_the_user_key_is_private_and_outside_the_cache_dir(tmp_path: pathlib.Path) -> None:
    path = pathlib.Path(user_key_file())
    assert path.is_relative_to(tmp_path / "config")  # XDG_CONFIG_HOME (conftest), not RAYCOMPILE_CACHE_DIR
    key = load_secret()
    assert len(key) == 64 and load_secret() == key == path.read_bytes()
    assert (path.stat().st_mode & 0o777) == 0o600 and (path.parent.stat().st_mode & 0o077) == 0


def test_processes_creating_the_user_key_at_once_agree(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    code = "from raycompile.cache.signing import derive, load_secret, user_key_file; print(load_secret().decode())"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(6)]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(keys) == 1 and keys == {load_secret().decode()}
    assert [p.name for p in pathlib.Path(user_key_file()).parent.iterdir()] == ["secret.key"]  # no temp files left


def test_a_derived_key_differs_from_its_source_and_is_stable() -> None:
    key = load_secret()
    assert derive(key, "cluster-secret") == derive(key, "cluster-secret") != key
    assert derive(key, "cluster-secret") != derive(b"another user's key", "cluster-secret")
