"""Max-autotune decisions: the timings of one decision's candidates, shared by every process.

A decision is one call of Inductor's autotune lookup: an op (``mm``, ``addmm``...), its inputs'
key (sizes, strides, dtypes, device type), and the set of candidate choices (each named by
Inductor's own ``ChoiceCaller.hash_key()``). Stock Inductor keeps the timings it took in a file of
its node's cache dir and uses them instead of timing again; here they are filed in the farm's
signed tiers (local, then shared), keyed also by the GPU or CPU model that took them and the
torch/triton versions. A process that meets the same decision later, on any node, takes the stored
timings, so it picks what the first picked, compiles no candidate and times none
(``wrapper/decisions.py``'s ``SharedDecisions``).

The first timings filed win: a process that timed a decision itself files them only where none are
stored yet, and otherwise takes the stored ones (it adopts the other's picks). Two processes that
time the same decision at the same moment can both file theirs (the tiers have no
compare-and-set); the later write wins from then on. Stored as JSON (``Infinity`` for a choice
that failed), never pickled.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Sequence
from typing import Any

from .store import Entry, get_json

Timings = dict[str, float]  # choice hash key -> milliseconds (inf: failed)


def decision_key(group: str, versions: str, precision: str, op: str, inputs: str, hint: Any,
                 choices: Sequence[str]) -> str:
    """The cache key of a decision: where it is timed (``group``: the GPU or CPU model), with what
    (``versions``), on what (``op``, ``inputs``, ``hint``: Inductor's size hint override,
    ``precision``: the float32 matmul precision) among which candidates (``choices``, any order)."""
    what = json.dumps([group, versions, precision, op, inputs, repr(hint), sorted(choices)])
    return hashlib.sha256(f"autotune-decision:{what}".encode()).hexdigest()


def _timings(value: Any) -> Timings | None:
    if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
        return None
    return {str(k): float(v) for k, v in value.items()}


class DecisionStore:
    """Decisions by key: a memo in front of the cache tiers (``cache`` None: this process only).
    ``submit(fn, *args)``: where the writes to the tiers run (an executor's submit: a decision is
    made on Inductor's thread, which must not wait on a shared tier); default: here."""

    def __init__(self, cache: Any | None, submit: Any = None) -> None:
        self.cache = cache
        self._submit = submit
        self._memo: dict[str, Timings] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Timings | None:
        """The stored timings (memo, local tier, then shared: a shared hit is copied to the local
        tier), or None."""
        with self._lock:
            if key in self._memo:
                return dict(self._memo[key])
        timings = _timings(get_json(self.cache, key, "timings.json")) if self.cache is not None else None
        if timings is None:
            return None
        with self._lock:
            self._memo[key] = timings
        return dict(timings)

    def put_first(self, key: str, timings: Timings, meta: dict[str, Any] | None = None) -> Timings:
        """File ``timings`` unless a decision is stored under ``key`` already; returns the stored
        one (the first), which the caller uses."""
        stored = self.get(key)
        if stored is not None:
            return stored
        with self._lock:
            self._memo[key] = dict(timings)
        if self.cache is not None:
            blob = json.dumps({k: (v if math.isfinite(v) else math.inf) for k, v in timings.items()}, sort_keys=True)
            entry = Entry(key, {"timings.json": blob.encode()}, dict(meta or {}))
            if self._submit is not None:
                try:
                    self._submit(self.cache.put, entry)
                    return dict(timings)
                except RuntimeError:  # the executor is shut down (the session is closing): write here
                    pass
            self.cache.put(entry)
        return dict(timings)
