"""The libraries of Inductor's CPU instruction-set checks as tier entries of their own, so a node
that checks without compiled frames takes them instead of building them (``wrapper/compat/isa.py``
does the checks' side). Pure cache code: a blob name in, bytes out."""

from __future__ import annotations

from collections.abc import Callable

from ..observe.stats import Stats
from . import keys
from .store import Entry
from .tiered import Cache


def isa_exchange(cache: Cache, stats: Stats) -> tuple[Callable[[list[str]], dict[str, bytes]],
                                                       Callable[[str, bytes], None]]:
    """(fetch, publish) for ``compat.isa.isa_checks_recorded``: a check library by blob name
    from the tiers (a signed entry, ``keys.isa_library_key``; counted ``isa_libraries_fetched``),
    and one this process built into them (``isa_libraries_published``)."""

    def fetch(names: list[str]) -> dict[str, bytes]:
        wanted = {keys.isa_library_key(name): name for name in names}
        out = {}
        for key, got in cache.lookup_many(list(wanted)).items():
            data = got.blobs.get(wanted[key]) if isinstance(got, Entry) else None
            if data is not None:
                out[wanted[key]] = data
        stats.add(isa_libraries_fetched=len(out))
        return out

    def publish_one(name: str, data: bytes) -> None:
        cache.put(Entry(keys.isa_library_key(name), {name: data},
                        {"label": f"library of an instruction-set check ({name.rsplit('/', 1)[-1]})"}))
        stats.add(isa_libraries_published=1)

    return fetch, publish_one
