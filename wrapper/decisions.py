"""Max-autotune's decisions shared by every process: the Inductor side of ``cache/decisions.py``.

Every decision (``PersistentCache.lookup``, through ``compat.autotune.decisions_installed``) is
answered from the cache when any process, on any node, filed it; else it is timed here, as stock
times it, and filed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..kernels import Versions
from ..observe.stats import Stats
from .compat.autotune import decision_device, decisions_installed, matmul_precision

log = logging.getLogger("raycompile.autotune")


class SharedDecisions:
    """Every max-autotune decision's timings, shared through the farm's cache
    (``cache/decisions.py``): a decision stored by any process (this node's or another's, timed on
    the same GPU or CPU model with the same torch and triton) is answered from the store, so this
    process picks what that one picked, and compiles and times no candidate (Inductor asks first,
    with no benchmark, whether every candidate's timing is known, and skips their precompile when it
    is). A decision timed here is filed unless another was filed first, whose timings are then used
    instead (adopted), so every process of a job picks the same. Installed with ``install()``,
    called by Inductor through ``compat.autotune.decisions_installed``.

    ``groups``: (this process's GPU group or None, its CPU's); a decision on CUDA inputs is keyed by
    the first, one on CPU inputs by the second. Counted: ``autotune_decisions_shared`` (answered from
    the store), ``autotune_decisions_timed`` (timed here and filed), ``autotune_decisions_adopted``
    (timed here, another's taken)."""

    def __init__(self, store: Any, stats: Stats, groups: tuple[str | None, str]) -> None:
        self.store, self.stats, self.groups = store, stats, groups
        self._versions = repr(Versions.here())
        self._mine: set[str] = set()  # decisions this process timed: met again, they are not another's

    def _key(self, choices: Sequence[Any], op: str, inputs: str, hint: Any) -> tuple[str, list[str]] | None:
        from ..cache.decisions import decision_key

        device = decision_device(inputs)
        group = self.groups[0] if device == "cuda" else self.groups[1] if device == "cpu" else None
        if group is None:  # another device, or an inputs key of a form not known here: not shared
            return None
        hashes = [str(c.hash_key()) for c in choices]
        if len(set(hashes)) != len(hashes):  # two candidates Inductor cannot tell apart: not keyed by it
            return None
        return decision_key(group, self._versions, matmul_precision(), op, inputs, hint, hashes), hashes

    def __call__(self, choices: Sequence[Any], op: str, inputs: str, hint: Any, benchmark: Any,
                 stock: Callable[[Any], dict[Any, float]]) -> dict[Any, float]:
        try:
            keyed = self._key(choices, op, inputs, hint)
            stored = self.store.get(keyed[0]) if keyed is not None else None
        except Exception as e:  # noqa: BLE001 - a choice without a key, or a store that fails: decided here, as stock
            log.debug("raycompile: max-autotune decision %s not shared (%s: %s)", op, type(e).__name__, e)
            return stock(benchmark)
        if keyed is None:
            return stock(benchmark)
        key, hashes = keyed
        if stored is not None and all(h in stored for h in hashes):
            # the decision itself (not Inductor's probe before precompiling), made by another process
            # (one this process made already, another layer's GEMM of the same shape, stock answers
            # from its own cache as well)
            if benchmark is not None and key not in self._mine:
                self.stats.add(autotune_decisions_shared=1)
            return {c: stored[h] for c, h in zip(choices, hashes, strict=True)}
        timings = stock(benchmark)
        if benchmark is None or len(timings) != len(choices) or not all(c in timings for c in choices):
            return timings  # a probe, or Inductor did not time them all: nothing to file
        ours = {h: float(timings[c]) for c, h in zip(choices, hashes, strict=True)}
        try:
            first = self.store.put_first(key, ours, {"op": op})
        except Exception as e:  # noqa: BLE001 - not filed: the next process times it again
            log.debug("raycompile: max-autotune decision %s not filed (%s: %s)", op, type(e).__name__, e)
            first = ours
        self._mine.add(key)
        if first == ours or not all(h in first for h in hashes):
            self.stats.add(autotune_decisions_timed=1)
            return timings
        self.stats.add(autotune_decisions_adopted=1)
        return {c: first[h] for c, h in zip(choices, hashes, strict=True)}

    def install(self) -> contextlib.AbstractContextManager[None]:
        return decisions_installed(self)
