"""Seam family "isa": Inductor's checks of this CPU's vector instruction sets (``cpu_vec_isa``),
whose libraries travel with compiled frames and through the tiers.

Before its first C++ kernel, Inductor checks each instruction set this CPU reports: it builds a
small library for it into its cache dir (``VecISA.check_build``: g++, 0.6-1 s each, unless the
library is there), then loads it in a child process. A fresh node that loads a CPU model's
compiled frames builds them all again: 5.5 s of a warm Mixtral-style CPU step's 7.2 s on the
2-CPU box. The process that wrote the frames recorded which libraries its checks found or built
(``isa_checks_recorded``); they go with the entry (``isa_libraries``) and a node that loads it
puts them in its cache dir (``install_isa_libraries``). Its checks then find them and skip the
builds; each is still loaded in a child process, so the check of this CPU stays its own. Without
frames (``dynamo_cache`` off, frames that miss, a waiter of another node's flight), the session
hands ``isa_checks_recorded`` a fetch and a publish through its tiers: a check whose library is not
in this cache dir takes it from there, and one this process had to build is published.

A library is named by a hash of its source and of a fingerprint of the compiler, the set's flags
and torch's version: one made by another compiler or torch is never found here, and is not used.

Checked on torch 2.13.0 (``check()``) and against torch 2.11.0's source (its wheel's
``cpu_vec_isa.py`` and ``codecache.py``): 2.11 names a library by the set's base flags
(``_arch_flags``), 2.13 by its build flags (``build_arch_flags()``); both names are looked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from ...cache import write_missing
from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    "VecISA.check_build": ("torch._inductor.cpu_vec_isa", "VecISA.check_build"),
    "_get_isa_dry_compile_fingerprint": ("torch._inductor.cpu_vec_isa", "_get_isa_dry_compile_fingerprint"),
    "codecache.get_hash": ("torch._inductor.codecache", "get_hash"),
    "codecache.get_path": ("torch._inductor.codecache", "get_path"),
    "cache_dir (isa)": ("torch._inductor.runtime.runtime_utils", "cache_dir"),
}

log = logging.getLogger("raycompile.isa")

ISA_BLOB = "inductor-isa:"  # blob name prefix: inductor-isa:<subdir>/<key>.so, under Inductor's cache dir
# <key[1:3]>/<key>.so, the key "c" and 51 base32 characters (Inductor's code_hash)
_NAME = re.compile(r"(?P<sub>[a-z0-9]{2})/(?P<key>c[a-z0-9]{51})\.so")

_found: set[str] = set()  # the libraries this process's checks found or built, by path


def _paths(isa: Any, code: str) -> list[str]:
    """Where ``isa``'s check of ``code`` looks for its library, as ``check_build`` names it:
    torch 2.13's name, then 2.11's."""
    from torch._inductor import codecache, cpu_vec_isa

    out = []
    for flags in dict.fromkeys((isa.build_arch_flags(), isa._arch_flags)):
        key = codecache.get_hash(code.strip(), cpu_vec_isa._get_isa_dry_compile_fingerprint(flags))
        _, subdir, _ = codecache.get_path(key, "cpp")
        out.append(os.path.join(subdir, f"{key}.so"))
    return out


def _library(isa: Any, code: str) -> str | None:
    """The library ``isa``'s check of ``code`` found or built."""
    return next((path for path in _paths(isa, code) if os.path.isfile(path)), None)


def _blob(path: str) -> str | None:
    """The blob name of a library at ``path`` in this process's Inductor cache dir, else None."""
    from torch._inductor.runtime.runtime_utils import cache_dir

    name = os.path.relpath(os.path.realpath(path), os.path.realpath(cache_dir()))
    return ISA_BLOB + name if _NAME.fullmatch(name) else None


@contextlib.contextmanager
def isa_checks_recorded(fetch: Callable[[list[str]], dict[str, bytes]] | None = None,
                        publish: Callable[[str, bytes], None] | None = None) -> Iterator[None]:
    """While inside, each of this process's checks records the library it found or built (the
    check's own result is unchanged); restored exactly on exit.

    With ``fetch`` (blob names -> the blobs the session's tiers hold of them) and ``publish``
    (blob name, bytes: into the tiers), the libraries also travel without compiled frames: a check
    whose library is not in this cache dir first takes it from the tiers, and a library this
    process had to build is published for the nodes that check after it."""
    from torch._inductor.cpu_vec_isa import VecISA

    stock = VecISA.__dict__["check_build"]

    def check_build(self: Any, code: str, *args: Any, **kwargs: Any) -> bool:
        absent = None  # the blobs looked for in the tiers and not found there
        if fetch is not None:
            try:
                paths = _paths(self, code)
                if not any(os.path.isfile(p) for p in paths):
                    names = [b for b in (_blob(p) for p in paths) if b is not None]
                    got = fetch(names) if names else {}
                    install_isa_libraries(got)
                    absent = [] if got else names
            except Exception as e:  # noqa: BLE001 - the check builds it, as stock's does
                log.debug("raycompile: an instruction-set check's library not taken from the cache: %s", e)
        ok = stock(self, code, *args, **kwargs)
        try:
            path = _library(self, code)
        except Exception:  # noqa: BLE001 - only what travels with frames: the check stands as it is
            path = None
        if path is not None:
            _found.add(path)
        # built here and passed here (a build cut short would fail the next node's check too): the
        # next node takes it
        if path is not None and ok and publish is not None and absent:
            try:
                blob = _blob(path)
                if blob in absent:
                    with open(path, "rb") as f:
                        publish(blob, f.read())
            except Exception as e:  # noqa: BLE001 - that node builds it, as stock's does
                log.debug("raycompile: an instruction-set check's library not published: %s", e)
        return ok  # type: ignore[no-any-return]

    VecISA.check_build = check_build
    try:
        yield
    finally:
        VecISA.check_build = stock


def isa_libraries() -> dict[str, bytes]:
    """The libraries this process's checks found or built in this cache dir, as blobs
    (``inductor-isa:<subdir>/<key>.so``)."""
    out = {}
    for path in sorted(_found):
        blob = _blob(path)
        if blob is None:  # in another cache dir, or not a name Inductor gives one
            continue
        try:
            with open(path, "rb") as f:
                out[blob] = f.read()
        except OSError:
            continue
    return out


def install_isa_libraries(blobs: dict[str, bytes]) -> int:
    """Put check libraries (blobs of ``isa_libraries``, from a signed entry) where this process's
    checks look for them, unless they are there; returns how many were written."""
    from torch._inductor.runtime.runtime_utils import cache_dir

    files = {}
    for blob, data in blobs.items():
        if not blob.startswith(ISA_BLOB):
            continue
        m = _NAME.fullmatch(blob[len(ISA_BLOB):])
        if m is not None and m.group("key")[1:3] == m.group("sub"):
            files[os.path.join(cache_dir(), m.group("sub"), f"{m.group('key')}.so")] = data
    return write_missing(files)
