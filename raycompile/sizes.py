"""One size syntax for every option and setting that takes a size (``cache prune --max-size``,
``cache set-max-size``, ``RAYCOMPILE_CACHE_MAX_BYTES``), the one ccache 4 uses:

- plain bytes: ``1000000`` (or ``1000000B``);
- decimal suffixes, powers of 1000: ``K M G T`` (also ``KB MB GB TB``): ``5G`` is 5,000,000,000 bytes;
- binary suffixes, powers of 1024: ``Ki Mi Gi Ti`` (also ``KiB MiB GiB TiB``): ``5Gi`` is 5 * 2**30.

Suffixes are case-insensitive, a fraction is allowed (``1.5G``) and so is a space before the
suffix (``500 MB``).
"""

from __future__ import annotations

import re

from .errors import SettingsError

_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(i?)b?|b)?", re.IGNORECASE)
_EXAMPLES = ("expected a size such as 500000, 500K, 1.5G or 2GiB "
             "(K, M, G, T: powers of 1000; Ki, Mi, Gi, Ti: powers of 1024)")


def parse_size(text: str) -> int:
    """The number of bytes ``text`` stands for (see the module's docstring), rounded to a byte.

    Raises SettingsError, with examples of the syntax, when ``text`` is not a size (a negative
    number, an unknown suffix, anything but a string)."""
    m = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise SettingsError(f"{text!r} is not a size: {_EXAMPLES}")
    number, prefix, binary = m.groups()
    power = "kmgt".index(prefix.lower()) + 1 if prefix else 0
    return round(float(number) * (1024 if binary else 1000) ** power)


def format_size(n: int) -> str:
    """``n`` bytes for people, in decimal units as ccache prints them: ``512 B``, ``1.5 kB``,
    ``10.0 GB``. ``parse_size`` reads the result back (to within the rounding)."""
    if n < 1000:
        return f"{n} B"
    for power, unit in enumerate(("kB", "MB", "GB"), start=1):
        # the next unit as soon as this one would round to 1000.0
        if round(n / 1000**power, 1) < 1000:
            return f"{n / 1000**power:.1f} {unit}"
    return f"{n / 1000**4:.1f} TB"
