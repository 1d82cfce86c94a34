"""``raycompile explain`` (``raycompile cache explain``): the misses the last session in a cache dir
kept, set against a tier's entries: the local one, a ``file://`` or ``redis://`` one, or the
cluster's ``ray://head``, whose service it reads after joining the cluster as sessions do. Read
only: nothing is verified as a hit, nothing unpickled."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .cache.tiered import shared_tier
from .cli_cache import _known_keys, _local_root, _tier
from .errors import SettingsError
from .settings import Settings


def explain_misses(args: argparse.Namespace) -> int:
    """The misses the last session in the local cache dir kept (cache/explain.py's MISSES_FILE),
    each set against the tier's entries; exit 1 when there is no record of a session."""
    from .cache import explain

    path = os.path.join(_local_root(args), explain.MISSES_FILE)
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        print(f"no record of a session's misses at {path} ({e}); run a session with this cache dir first "
              "(RAYCOMPILE_CACHE_DIR or --dir)", file=sys.stderr)
        return 1
    tier = _explained_tier(args)
    secrets = _known_keys(shared=bool(getattr(args, "shared", None)))
    stored = explain.read(tier.manifests(), secrets)
    found = explain.explain([(r["label"], r["key"], r.get("parts")) for r in rows], stored, next(iter(secrets)))
    if args.json:
        print(json.dumps([{"label": e.label, "key": e.key, "nearest": e.nearest, "differs": e.differs,
                           "values": e.values, "signer": e.signer, "reason": e.reason} for e in found], indent=1))
        return 0
    where = getattr(args, "shared", None) or f"the local tier ({getattr(tier, 'root', '')})"
    print(f"{len(found)} lookups of the last session missed; set against {len(stored)} entries of {where}:")
    for e in found:
        print(f"  {e.text()}")
    return 0


def _explained_tier(args: argparse.Namespace) -> Any:
    """The tier ``explain`` reads manifests from: ``_tier``'s, a ``redis://`` one, or the cluster's
    ``ray://head`` (read only: explain unpickles nothing). Raises SettingsError when that Redis or
    the head's service does not answer: an unreachable tier must not look like an empty one."""
    shared = getattr(args, "shared", None) or ""
    if shared == "ray://head":
        return _head_tier(shared)
    if not shared.startswith(("redis://", "rediss://")):
        return _tier(args)
    from .cache.store import TierUnavailable

    tier = shared_tier(shared, b"")  # read only: manifests are read, nothing is verified or unpickled
    try:
        tier.ping()
    except TierUnavailable as e:
        raise SettingsError(f"--shared {shared!r}: {e}; start it, or check the address (the one the "
                            "sessions' RAYCOMPILE_SHARED_CACHE names)") from e
    return tier


def _head_tier(shared: str) -> Any:
    """The head node's tier of the Ray cluster the sessions here join (RAY_ADDRESS, or Ray's
    current-cluster file, as ``ray.init()`` finds it), joined as they join it; its service is
    looked up, never started. Raises SettingsError without a cluster, or without the service."""
    from .cache.store import TierUnavailable
    from .errors import FarmUnavailableError
    from .orchestrator.cache_service import RayHeadTier
    from .orchestrator.connect import connect, resolve

    settings = Settings.resolve()
    try:
        target = resolve(settings)
        if not target.joins:
            raise SettingsError(f"--shared {shared}: no Ray cluster runs here (no RAY_ADDRESS, no current-cluster "
                                "file); run this on a node of the cluster, or set RAY_ADDRESS to its head")
        connect(settings, target)
        tier = RayHeadTier.existing(b"", namespace=settings.namespace)  # read only, as above
        tier.ping()
    except (FarmUnavailableError, TierUnavailable) as e:
        raise SettingsError(f"--shared {shared}: {e}") from e
    return tier
