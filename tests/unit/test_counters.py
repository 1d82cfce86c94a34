"""The counters' one declaration (``raycompile/counters.py``) is what ``stats()``, the Ray metrics
and a cache dir's lasting counters are made from."""

from __future__ import annotations

from raycompile import counters
from raycompile.cache import usage
from raycompile.observe.stats import Stats
from raycompile.orchestrator import metrics


def test_stats_counts_what_the_registry_declares() -> None:
    snap = Stats().snapshot()
    numbers = {k for k, v in snap.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers == set(counters.BY_NAME)
    for c in counters.COUNTERS:
        assert type(snap[c.name]) is (float if c.seconds else int), c.name
    stats = Stats()
    stats.add(jobs=2, compile_seconds=1.23456)
    assert stats.snapshot()["jobs"] == 2 and stats.snapshot()["compile_seconds"] == 1.235


def test_metrics_and_lasting_counters_come_from_the_registry() -> None:
    assert metrics.COUNTERS == {c.name: c.metric for c in counters.COUNTERS if c.metric is not None}
    assert set(usage.COUNTERS) == set(counters.BY_NAME)
    first: dict[str, str] = {}
    for name, _, description in metrics.COUNTERS.values():
        first.setdefault(name, description)
    assert all(first.values()), "a metric's first counter must describe it"
    assert len(counters.BY_NAME) == len(counters.COUNTERS), "a counter declared twice"
    assert all(c.help for c in counters.COUNTERS), "a counter without its meaning"
