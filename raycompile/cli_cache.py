"""``raycompile cache ...``: look after the local tier (or a file:// shared tier)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tarfile
import tempfile

from .cache.signing import load_secret
from .cache.store import FileTier, verify_entry
from .errors import SettingsError
from .settings import Settings

EXAMPLE = """examples:
  raycompile cache stats
  raycompile cache verify                 # exit 1 if any entry is corrupt or unsigned
  raycompile cache prune --max-size 5G    # LRU: evict least recently used entries
  raycompile cache prune --max-size 500G --shared file:///mnt/nfs/raycompile
  raycompile cache export cache.tar.gz    # then, on an air-gapped cluster with the same RAYCOMPILE_SECRET:
  raycompile cache import cache.tar.gz
  raycompile cache clear"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="inspect, verify, prune, clear, export or import the cache",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["stats", "verify", "prune", "clear", "export", "import"])
    p.add_argument("file", nargs="?", help="the archive, for export and import")
    p.add_argument("--dir", help="the local tier (default: RAYCOMPILE_CACHE_DIR or ~/.cache/raycompile)")
    p.add_argument("--shared", help="act on this file:// shared tier instead of the local one")
    p.add_argument("--max-size", help="for prune: a size such as 500M, 5G, 1T")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.I)
    if not m:
        raise SettingsError(f"--max-size {text!r}: expected a size such as 500M, 5G or 1T")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def _tier(args: argparse.Namespace) -> FileTier:
    root = os.path.abspath(os.path.expanduser(args.dir or Settings.resolve().cache_dir))
    secret = load_secret(os.path.join(root, "secret.key"))
    if args.shared:
        if not args.shared.startswith("file:///"):
            raise SettingsError(f"--shared {args.shared!r}: only a file:///path tier can be acted on here")
        return FileTier(args.shared.removeprefix("file://"), secret, "shared")
    return FileTier(root, secret, "local")


def run(args: argparse.Namespace) -> int:
    if args.action in ("export", "import") and not args.file:
        raise SettingsError(f"cache {args.action} needs a FILE argument")
    tier = _tier(args)
    entries = tier.entries()
    if args.action == "stats":
        print(f"{tier.name} tier {tier.root}: {len(entries)} entries, {sum(s for _, s, _ in entries) / 2**20:.1f} MiB")
        return 0
    if args.action == "verify":
        bad = 0
        for _, _, key in sorted(entries, key=lambda e: e[2]):
            raw = tier.get_raw(key)
            result = verify_entry(key, raw[0], raw[1], tier.secret) if raw else None
            if raw is None or not hasattr(result, "blobs"):
                bad += 1
                print(f"BAD {key}: {getattr(result, 'reason', 'unreadable')} {getattr(result, 'detail', '')}")
        print(f"verified {len(entries)} entries: {bad} bad")
        return 1 if bad else 0
    if args.action == "prune":
        if not args.max_size:
            raise SettingsError("cache prune needs --max-size, e.g. --max-size 5G")
        evicted = tier.prune(parse_size(args.max_size))
        print(f"evicted {evicted} entries; {len(tier.entries())} remain")
        return 0
    if args.action == "clear":
        shutil.rmtree(os.path.join(tier.root, "entries"), ignore_errors=True)
        print(f"cleared {len(entries)} entries from {tier.root}")
        return 0
    if args.action == "export":
        tmp = f"{args.file}.tmp.{os.getpid()}"
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(os.path.join(tier.root, "entries"), arcname="entries")
        os.replace(tmp, args.file)
        print(f"exported {len(entries)} entries to {args.file} (they verify only where RAYCOMPILE_SECRET matches)")
        return 0
    return _import(tier, args.file)


def _import(tier: FileTier, path: str) -> int:
    """Verify every entry of the archive with this cluster's secret before publishing it."""
    staging = FileTier(tempfile.mkdtemp(prefix="raycompile-import-"), tier.secret, "import")
    try:
        with tarfile.open(path, "r:*") as tar:
            tar.extractall(staging.root, filter="data")  # no absolute paths, no links out
        added = refused = 0
        for _, _, key in staging.entries():
            raw = staging.get_raw(key)
            result = verify_entry(key, raw[0], raw[1], tier.secret) if raw else None
            if raw is None or not hasattr(result, "blobs"):
                refused += 1
                continue
            tier.put_raw(key, raw[0], {k: v for k, v in raw[1].items() if v is not None})
            added += 1
    except (tarfile.TarError, OSError) as e:
        print(f"raycompile: cannot import {path}: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(staging.root, ignore_errors=True)
    print(f"imported {added} entries ({refused} refused: corrupt, or signed with another secret)")
    return 1 if refused else 0
