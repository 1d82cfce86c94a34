"""``raycompile cache ACTION``: look after the local tier (or a file:// shared tier), as
``ccache -s / -z / -M / -C`` and ``sccache --show-stats`` do theirs.

Each action is an argparse subcommand with its own ``--help`` and example; a wrong or extra
argument is a usage error (exit 2). The counters ``stats`` shows are what sessions recorded in
the local cache directory (``cache/usage.py``); the lasting cap ``set-max-size`` stores is the
one sessions use when RAYCOMPILE_CACHE_MAX_BYTES is not set.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from typing import Any

from .cache.signing import load_secret
from .cache.store import FileTier, verify_entry
from .cache.tiered import shared_tier
from .cache.usage import Usage
from .errors import SettingsError
from .settings import DEFAULT_CACHE_MAX_BYTES, Settings
from .sizes import format_size, parse_size

ENV_CAP = "RAYCOMPILE_CACHE_MAX_BYTES"
SIZES = "SIZE: 5G = 5*1000^3 bytes, 5Gi (or 5GiB) = 5*1024^3; K, M, G, T and Ki, Mi, Gi, Ti"
EXAMPLES = {
    "stats": """examples:
  raycompile cache stats                  # entries, size and cap, hits, misses, hit rate, errors
  raycompile cache stats --json           # the same, for machines
  raycompile cache stats --shared file:///mnt/nfs/raycompile   # a shared tier's entries and size""",
    "zero-stats": """example:
  raycompile cache zero-stats             # counters to 0; `stats` then says when they were zeroed""",
    "verify": """examples:
  raycompile cache verify                 # exit 1 if any entry is corrupt or signed with another secret
  raycompile cache verify --shared file:///mnt/nfs/raycompile""",
    "prune": f"""examples:
  raycompile cache prune                  # LRU: evict least recently used entries down to the cap
  raycompile cache prune --max-size 5G    # ... down to 5 GB instead (0: evict everything)
  raycompile cache prune --max-size 500G --shared file:///mnt/nfs/raycompile
{SIZES}""",
    "set-max-size": f"""examples:
  raycompile cache set-max-size 20G       # a lasting cap, kept in the cache directory (like ccache -M)
  raycompile cache set-max-size 0         # no cap
sessions evict least recently used entries beyond it; {ENV_CAP} wins when set.
{SIZES}""",
    "clear": """example:
  raycompile cache clear                  # every entry; the counters and the cap stay""",
    "export": """example:
  raycompile cache export cache.tar.gz    # then `cache import` it where RAYCOMPILE_SECRET is the same""",
    "import": """example:
  raycompile cache import cache.tar.gz    # each entry verified with this secret first; exit 1 if any is refused""",
    "explain": """examples:
  raycompile cache explain --shared file:///mnt/nfs/raycompile   # why the last session here missed
  raycompile cache explain --shared redis://cache-host:6379/0    # the same against a Redis tier
  raycompile cache explain --shared ray://head   # the head node's tier (joins the cluster, as sessions do)
  raycompile cache explain --json         # against the local tier, for machines
each kernel the last session in this cache dir compiled, and each function it traced, with the part
of its key that differs from the nearest entry of the tier: torch, triton or CUDA version, the GPU,
an Inductor option, the source, the secret that signs it.""",
}
HELP = {
    "stats": "show the tier's entries, size and cap, and the hits, misses and errors sessions recorded",
    "zero-stats": "set the recorded counters to 0",
    "verify": "check every entry's signature and sha256",
    "prune": "evict least recently used entries down to the cap (or --max-size)",
    "set-max-size": "set the local tier's lasting size cap (0: none)",
    "clear": "remove every entry",
    "export": "write every entry to a tar.gz archive",
    "import": "add the entries of an archive that verify with this cluster's secret",
    "explain": "say why the last session's lookups missed: the part of each key that differs from the nearest entry",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``cache`` and its actions to the ``raycompile`` command's subparsers."""
    raw = argparse.RawDescriptionHelpFormatter
    examples = [line for e in EXAMPLES.values() for line in e.splitlines() if line.startswith("  raycompile cache")]
    p = sub.add_parser("cache", help="show statistics of, verify, prune, cap, clear, export or import the cache",
                       description="Look after raycompile's local cache tier (or a file:// shared tier). "
                                   "`raycompile cache ACTION --help` says more about each action.",
                       epilog="\n".join(["examples:", *examples, SIZES]), formatter_class=raw)
    actions = p.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    parsers = {name: actions.add_parser(name, help=HELP[name], description=HELP[name][0].upper() + HELP[name][1:]
                                        + ".", epilog=EXAMPLES[name], formatter_class=raw) for name in HELP}
    parsers["stats"].add_argument("--json", action="store_true", help="print the statistics as JSON")
    parsers["explain"].add_argument("--json", action="store_true", help="print the explanations as JSON")
    parsers["prune"].add_argument("--max-size", type=_size, metavar="SIZE",
                                  help="prune down to this size instead of the cap, e.g. 5G or 500Mi")
    parsers["set-max-size"].add_argument("size", type=_size, metavar="SIZE", help="e.g. 20G, 500Mi; 0: no cap")
    parsers["export"].add_argument("file", metavar="FILE", help="the archive to write (.tar.gz)")
    parsers["import"].add_argument("file", metavar="FILE", help="the archive to read")
    for name, parser in parsers.items():
        parser.add_argument("--dir", help="the local tier (default: RAYCOMPILE_CACHE_DIR or ~/.cache/raycompile)")
        if name not in ("zero-stats", "set-max-size"):  # counters and the cap live in the local dir
            parser.add_argument("--shared", metavar="URL",
                                help="act on this file:///path shared tier instead of the local one"
                                + (" (explain: or redis://host:port/db, or ray://head)" if name == "explain" else ""))


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except SettingsError as e:  # argparse turns this one into "argument SIZE: ...", exit 2
        raise argparse.ArgumentTypeError(str(e)) from None


# -- where --------------------------------------------------------------------------------------


def _local_root(args: argparse.Namespace) -> str:
    return os.path.abspath(os.path.expanduser(args.dir or Settings.resolve().cache_dir))


def _tier(args: argparse.Namespace, signed: bool = True) -> FileTier:
    """The tier acted on. ``signed``: with the key sessions sign with (RAYCOMPILE_SECRET, else this
    user's key, cache/signing.py), for the actions that check or write entries; the others only
    count or delete them and need none.

    Raises SettingsError for a --shared that is not a file:///path, or names no directory this
    user can read: a typo, or a file system not mounted here, must not look like an empty tier."""
    root = _local_root(args)
    shared = getattr(args, "shared", None)
    if shared and not shared.startswith("file:///"):
        raise SettingsError(f"--shared {shared!r}: only a file:///path tier can be acted on here")
    secret = (Settings.resolve().secret_bytes or load_secret()) if signed else b""
    if shared:
        tier = shared_tier(shared, secret)  # where a URL becomes a tier (cache/tiered.py)
        assert isinstance(tier, FileTier)
        path = tier.root
        if not os.path.isdir(path):
            raise SettingsError(f"--shared {shared!r}: {path} is no directory (a typo, or a shared file system not "
                                f"mounted here?); for a new, empty tier create it first: mkdir -p {path}")
        if not os.access(path, os.R_OK | os.X_OK):
            raise SettingsError(f"--shared {shared!r}: this user cannot read {path}; run as a user who can, or "
                                "fix its permissions")
        return tier
    return FileTier(root, secret, "local")


def _cap(root: str) -> tuple[int | None, str]:
    """(the local tier's cap in bytes, None for no cap; where it comes from): RAYCOMPILE_CACHE_MAX_BYTES
    when set, else the lasting cap of ``root``, else the built-in default. 0 means no cap.

    Raises SettingsError when RAYCOMPILE_CACHE_MAX_BYTES is not a size."""
    configured = Settings.resolve().cache_max_bytes
    if configured is not None:
        cap, source = configured, ENV_CAP
    else:
        stored = Usage(root).max_bytes()
        cap, source = (DEFAULT_CACHE_MAX_BYTES, "default") if stored is None else (stored, "set-max-size")
    return cap or None, source


# -- the actions --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Run ``raycompile cache ACTION`` (but ``explain``: ``cli_explain.explain_misses``). Returns the
    exit status; raises SettingsError for bad usage (exit 2)."""
    action = {"stats": _stats, "zero-stats": _zero, "verify": _verify, "prune": _prune, "set-max-size": _set_cap,
              "clear": _clear, "export": _export, "import": _import}[args.cache_command]
    return action(args)  # explain: raycompile/cli_explain.py


def _report(args: argparse.Namespace) -> dict[str, Any]:
    """What ``cache stats`` shows, as the dict ``--json`` prints."""
    tier = _tier(args, signed=False)
    entries = tier.entries()
    out: dict[str, Any] = {"tier": tier.name, "path": tier.root, "entries": len(entries),
                           "bytes": sum(size for _, size, _ in entries)}
    if tier.name != "local":
        return out  # counters and the cap belong to a local cache directory
    cap, source = _cap(tier.root)
    counters = Usage(tier.root).read()
    updated, zeroed = counters.pop("updated_at"), counters.pop("zeroed_at")
    hits = counters["local_hits"] + counters["shared_hits"]
    lookups = hits + counters["misses"]
    out.update(max_bytes=cap, max_bytes_from=source, hits=hits, misses=counters["misses"], lookups=lookups,
               hit_rate=round(hits / lookups, 4) if lookups else None,
               errors=counters["shared_unavailable"] + counters["put_errors"],
               counters=counters, updated_at=updated, zeroed_at=zeroed)
    return out


def _stats(args: argparse.Namespace) -> int:
    report = _report(args)
    print(json.dumps(report, indent=2) if args.json else _render(report))
    return 0


def _render(s: dict[str, Any]) -> str:
    """``cache stats`` for people, laid out as ``ccache -s``."""
    rows = [("Cache directory", f"{s['path']} ({s['tier']} tier)"), ("Entries", str(s["entries"]))]
    if "counters" not in s:
        rows.append(("Cache size", format_size(s["bytes"])))
        return _table(rows) + "\n(hits and misses are counted per local cache directory: cache stats --dir DIR)"
    c, cap, lookups = s["counters"], s["max_bytes"], s["lookups"]
    size = format_size(s["bytes"])
    if cap is None:
        rows.append(("Cache size", f"{size}, no cap ({s['max_bytes_from']})"))
    else:
        rows.append(("Cache size", f"{size} of {format_size(cap)} ({100 * s['bytes'] / cap:.1f}%), "
                                   f"cap from {s['max_bytes_from']}"))
    def share(n: int) -> str:
        return f"{n} / {lookups} lookups" + (f" ({100 * n / lookups:.1f}%)" if lookups else "")

    rows += [
        ("Hits", share(s["hits"])),
        ("  local", str(c["local_hits"])),
        ("  shared", str(c["shared_hits"])),
        ("Misses", share(s["misses"])),
        ("Corrupt", f"{c['corrupt']} (failed their sha256: dropped, then compiled again)"),
        ("Refused", f"{c['refused']} (bad or missing signature: signed with another secret)"),
        ("Evictions", str(c["evictions"])),
        ("Errors", f"{s['errors']} (shared tier unreachable: {c['shared_unavailable']}, "
                   f"failed writes: {c['put_errors']})"),
        ("Compile jobs", f"{c['jobs']} ({c['failures']} failed, {c['fallbacks']} compiled locally), "
                         f"{c['compile_seconds']:.1f} s on the workers"),
        ("Read / written", f"{format_size(c['bytes_read'])} / {format_size(c['bytes_written'])}"),
        ("Stats updated", _when(s["updated_at"])),
        ("Stats zeroed", _when(s["zeroed_at"])),
    ]
    return _table(rows)


def _table(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"{label + ':':<18}{value}" for label, value in rows)


def _when(t: float | None) -> str:
    return "never" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _zero(args: argparse.Namespace) -> int:
    root = _local_root(args)
    try:
        Usage(root).zero()
    except OSError as e:
        print(f"raycompile: cannot zero the statistics in {root}: {e}", file=sys.stderr)
        return 1
    print(f"statistics zeroed ({root})")
    return 0


def _set_cap(args: argparse.Namespace) -> int:
    root = _local_root(args)
    try:
        Usage(root).set_max_bytes(args.size)
    except OSError as e:
        print(f"raycompile: cannot store the cap in {root}: {e}", file=sys.stderr)
        return 1
    held = sum(size for _, size, _ in FileTier(root, b"").entries())
    print(f"set the size cap of {root} to {format_size(args.size) if args.size else 'none (no cap)'}")
    if args.size and held > args.size:
        print(f"it holds {format_size(held)}: sessions evict down to the cap when they next write; "
              "`raycompile cache prune` does it now")
    configured = Settings.resolve().cache_max_bytes
    if configured is not None:
        print(f"raycompile: note: {ENV_CAP}={format_size(configured) if configured else 0} is set here, and wins "
              "over this cap", file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Every entry checked with the key sessions here sign this tier with; an entry refused is
    listed with the known key that does sign it, if any (this user's, RAYCOMPILE_SECRET, the Ray
    cluster's), so "signed with another secret" is told apart from altered or corrupt."""
    tier = _tier(args)
    keys = _known_keys(shared=bool(getattr(args, "shared", None)))
    expected, tier.secret = next(iter(keys.items()))
    entries = tier.entries()
    counts = {"ok": 0, "refused": 0, "corrupt": 0}
    for _, _, key in sorted(entries, key=lambda e: e[2]):
        raw = tier.get_raw(key)
        result = verify_entry(key, raw[0], raw[1], tier.secret) if raw else None
        if raw is not None and hasattr(result, "blobs"):
            counts["ok"] += 1
        elif raw is not None and getattr(result, "reason", "") == "refused":
            counts["refused"] += 1
            signer = next((name for name, k in keys.items() if k != tier.secret
                           and hasattr(verify_entry(key, raw[0], raw[1], k), "blobs")), None)
            print(f"REFUSED {key}: signed with another secret than {expected}"
                  + (f" (it verifies with {signer})" if signer else " (no key known here signs it, or it was altered)"))
        else:
            counts["corrupt"] += 1
            print(f"CORRUPT {key}: {getattr(result, 'reason', 'unreadable')} {getattr(result, 'detail', '')}".rstrip())
    print(f"verified {len(entries)} entries with {expected}: {counts['ok']} ok, {counts['refused']} signed with "
          f"another secret, {counts['corrupt']} corrupt")
    return 1 if counts["refused"] or counts["corrupt"] else 0


def _known_keys(shared: bool) -> dict[str, bytes]:
    """The keys an entry here may be signed with, the one sessions would use for this tier first:
    RAYCOMPILE_SECRET; for a shared tier, the Ray cluster's secret when a cluster runs here
    (RAY_ADDRESS, or Ray's current-cluster file); this user's key."""
    keys: dict[str, bytes] = {}
    secret = Settings.resolve().secret_bytes
    if secret:
        keys["RAYCOMPILE_SECRET"] = secret
    user = load_secret()
    if shared:
        cluster = _cluster_secret(user)
        if cluster is not None:
            keys["the Ray cluster's secret"] = cluster
    keys["this user's key"] = user
    return keys


def _cluster_secret(user: bytes) -> bytes | None:
    """The secret of the Ray cluster running here, None without one (reading it joins Ray)."""
    from .orchestrator.secret import running_cluster_secret

    return running_cluster_secret(Settings.resolve(), user)


def _prune(args: argparse.Namespace) -> int:
    if args.max_size is None and getattr(args, "shared", None):  # the usage error first, before the tier's
        raise SettingsError("cache prune --shared needs --max-size, e.g. --max-size 500G: "
                            "a shared tier has no lasting cap")
    tier = _tier(args, signed=False)
    if args.max_size is not None:
        cap, source = args.max_size, "--max-size"
    else:
        cap, source = _cap(tier.root)
    if cap is None:
        print(f"no size cap ({source}): nothing to prune; `raycompile cache set-max-size 20G` sets one")
        return 0
    evicted = tier.prune(cap)
    if tier.name == "local" and evicted:
        Usage(tier.root).record({"evictions": evicted})
    left = tier.entries()
    print(f"evicted {evicted} entries; {len(left)} remain, {format_size(sum(s for _, s, _ in left))} "
          f"of {format_size(cap)} ({source})")
    return 0


def _clear(args: argparse.Namespace) -> int:
    tier = _tier(args, signed=False)
    entries = tier.entries()
    shutil.rmtree(os.path.join(tier.root, "entries"), ignore_errors=True)
    print(f"cleared {len(entries)} entries from {tier.root}")
    return 0


def _export(args: argparse.Namespace) -> int:
    tier = _tier(args, signed=False)
    entries = tier.entries()
    tmp = f"{args.file}.tmp.{os.getpid()}"
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            if os.path.isdir(os.path.join(tier.root, "entries")):
                tar.add(os.path.join(tier.root, "entries"), arcname="entries")
        os.replace(tmp, args.file)
    except (tarfile.TarError, OSError) as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        print(f"raycompile: cannot export to {args.file}: {e}", file=sys.stderr)
        return 2
    print(f"exported {len(entries)} entries to {args.file} (they verify only where RAYCOMPILE_SECRET matches)")
    return 0


def _import(args: argparse.Namespace) -> int:
    """Verify every entry of the archive with this cluster's secret before publishing it."""
    tier, path = _tier(args), args.file
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
