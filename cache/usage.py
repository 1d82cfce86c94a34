"""What a cache directory has served, kept across sessions, as ccache keeps its statistics; and
the directory's lasting size cap (``raycompile cache set-max-size``, like ``ccache -M``).

Two small JSON files in the cache directory, next to ``entries/``:

- ``stats.json``: counters summed over every session that recorded itself here, plus when they
  were last updated and last zeroed;
- ``config.json``: ``{"max_bytes": N}``, the cap sessions use when RAYCOMPILE_CACHE_MAX_BYTES is
  not set; 0 means no cap, as ``ccache -M 0``.

Each read-modify-write holds ``usage.lock`` (a ``filelock.FileLock``), so processes that close at
once (64 training ranks on a node) all add their counts; each file is replaced atomically, so a
reader never sees half of one.

    usage = Usage(cache_dir)
    usage.record(raycompile.stats())   # when a session closes; never raises
    usage.read()["local_hits"]
    usage.set_max_bytes(5 * 10**9)
    usage.max_bytes()                  # 5000000000; None when never set
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from filelock import FileLock

from .. import counters as registry
from .files import write_atomic

log = logging.getLogger("raycompile.cache")

# The numeric counters of ``raycompile.stats()``, which add up across sessions: every one that
# raycompile/counters.py declares
COUNTERS = tuple(c.name for c in registry.COUNTERS)
STATS_FILE, CONFIG_FILE, LOCK_FILE = "stats.json", "config.json", "usage.lock"
LOCK_TIMEOUT_S = 10.0  # a session closing never waits longer than this for the others


class Usage:
    """The counters and the lasting cap of the cache directory ``root`` (created when first
    written)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self._lock = FileLock(os.path.join(self.root, LOCK_FILE), timeout=LOCK_TIMEOUT_S)

    # -- counters ------------------------------------------------------------------------------

    def record(self, snapshot: Mapping[str, Any]) -> None:
        """Add a session's counters (a ``raycompile.stats()`` snapshot: the names in ``COUNTERS``;
        other keys, and values that are not numbers, are ignored).

        Never raises for the directory: when it cannot be written (read-only, full, a file in the
        way) or its lock is held longer than ``LOCK_TIMEOUT_S``, logs a warning and returns."""
        deltas = {k: v for k, v in snapshot.items()
                  if k in COUNTERS and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}
        try:
            with self._locked():
                doc = self._load(STATS_FILE)
                counters = doc.setdefault("counters", {})
                for name, delta in deltas.items():
                    counters[name] = _add(counters.get(name, 0), delta)
                doc["updated_at"] = time.time()
                self._save(STATS_FILE, doc)
        except OSError as e:  # filelock's Timeout is an OSError too
            log.warning("raycompile: cannot record this session's cache statistics in %s (%s)", self.root, e)

    def read(self) -> dict[str, Any]:
        """Every counter in ``COUNTERS`` (0 when never recorded), plus ``updated_at`` and
        ``zeroed_at`` (epoch seconds, or None: never). Never raises: a missing or unreadable
        file reads as all zeros."""
        doc = self._load(STATS_FILE)
        counters = doc.get("counters", {}) if isinstance(doc.get("counters"), dict) else {}
        out: dict[str, Any] = {name: _number(counters.get(name)) for name in COUNTERS}
        out["updated_at"] = doc.get("updated_at")
        out["zeroed_at"] = doc.get("zeroed_at")
        return out

    def zero(self) -> None:
        """Set every counter to 0 and note when (``zeroed_at``), as ``ccache -z``.

        Raises OSError when the directory cannot be written."""
        with self._locked():
            now = time.time()
            self._save(STATS_FILE, {"counters": {}, "updated_at": now, "zeroed_at": now})

    # -- the lasting cap -----------------------------------------------------------------------

    def max_bytes(self) -> int | None:
        """The cap set with ``set_max_bytes``: bytes, 0 for no cap, None when never set (then a
        session uses its built-in default). Never raises: an unreadable file reads as never set."""
        value = self._load(CONFIG_FILE).get("max_bytes")
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    def set_max_bytes(self, n: int | None) -> None:
        """Store the cap: ``n`` bytes, 0 for no cap, None to forget it (back to the default).

        Raises ValueError for a negative ``n``, OSError when the directory cannot be written."""
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ValueError(f"max_bytes must be an integer >= 0 or None, got {n!r}")
        with self._locked():
            doc = self._load(CONFIG_FILE)
            if n is None:
                doc.pop("max_bytes", None)
            else:
                doc["max_bytes"] = n
            self._save(CONFIG_FILE, doc)

    # -- files ---------------------------------------------------------------------------------

    def _locked(self) -> FileLock:
        os.makedirs(self.root, exist_ok=True)  # the lock file lives in the directory
        return self._lock

    def _load(self, name: str) -> dict[str, Any]:
        path = os.path.join(self.root, name)
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            # a damaged file is started afresh by the next write, as ccache does with its own
            log.warning("raycompile: ignoring unreadable %s (%s)", path, e)
            return {}
        return doc if isinstance(doc, dict) else {}

    def _save(self, name: str, doc: dict[str, Any]) -> None:
        write_atomic(os.path.join(self.root, name), json.dumps(doc, indent=1, sort_keys=True).encode())


def _number(value: Any) -> int | float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _add(total: Any, delta: int | float) -> int | float:
    total = _number(total) + delta
    return round(total, 3) if isinstance(total, float) else total
