"""Why a lookup missed: each miss set against the entries a tier holds, naming the part of the key
that differs from the nearest one (pytorch#144859: a cache copied to an identical machine was
ignored, and nobody could tell why).

A key's parts are the inputs it was made of (``keys.parts_of``): versions, GPU arch, toolchain,
options as they are, sources and configs as digests. Every entry carries its key's parts in its
signed manifest. For a miss, the nearest entry is the one of the same kind and label (a kernel's
name, a compiled function's) with the fewest differing parts, else of the same kind; an entry that
only another secret signs is named as such: its parts are read, never trusted for anything else,
and nothing is unpickled.

    for e in explain(misses, tier.manifests(), {"this user's key": secret}):
        print(e.text())
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .keys import differing, frames_base
from .signing import verify

MISSES_FILE = "misses.json"  # in the local cache dir: the last session's misses, with their keys' parts

# what a part's name means to a user, the first match wins
_WHAT = (
    ("torch", "the torch version"), ("triton", "the triton version"), ("toolchain", "the compiler (ptxas or C++)"),
    ("arch", "the GPU or CPU target"), ("source", "the kernel's source"), ("option ", "an Inductor option"),
    ("system python", "the Python version"), ("system torch", "the torch version"),
    ("system toolkit", "the CUDA toolkit"), ("system triton", "the triton version"), ("system gpu", "the GPU"),
    ("function module_source", "the function's module source"), ("function", "the function"),
    ("options compiler_config", "the compile's mode or options"), ("options", "a torch.compile option"),
    ("config inductor", "Inductor's config"), ("config dynamo", "Dynamo's config"),
    ("config functorch", "AOTAutograd's config"), ("raycompile", "the raycompile version"),
    ("tag", "the cache key tag"),
)


def what(part: str) -> str:
    return next((text for prefix, text in _WHAT if part.startswith(prefix)), part)


@dataclass
class Stored:
    """An entry's key, label and parts as its manifest states them; ``signer``: the name of the
    known secret that signs it (None: none does)."""

    key: str
    label: str
    parts: dict[str, str]
    signer: str | None


@dataclass
class Explained:
    label: str
    key: str
    nearest: str | None = None  # the nearest entry's key
    differs: list[str] = field(default_factory=list)  # the parts that differ from it
    values: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # part -> (here, there)
    signer: str | None = None  # who signs the nearest entry, when not the expected secret
    reason: str = ""

    def text(self) -> str:
        return f"{self.label} ({self.key[:12]}): {self.reason}"


def read(manifests: Iterable[tuple[str, bytes]], secrets: Mapping[str, bytes]) -> list[Stored]:
    """The parts of every entry of ``manifests`` that has them. ``secrets``: name -> secret, the
    expected one first."""
    out = []
    for key, raw in manifests:
        try:
            doc = json.loads(raw)
            body = doc["body"]
            meta = body.get("meta") or {}
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        parts = meta.get("parts")
        if not isinstance(parts, dict) or not parts:
            continue
        text = json.dumps(body, sort_keys=True).encode()
        signer = next((name for name, secret in secrets.items() if verify(secret, text, doc.get("sig"))), None)
        out.append(Stored(key, str(meta.get("label", "")), {str(k): str(v) for k, v in parts.items()}, signer))
    return out


def explain(misses: Iterable[tuple[str, str, Mapping[str, str] | None]], stored: list[Stored],
            expected: str) -> list[Explained]:
    """For each miss (label, key, its parts or None), why: the nearest stored entry and the parts
    that differ, or what is missing. ``expected``: the name of the secret this process signs with."""
    out = []
    for label, key, parts in misses:
        e = Explained(label, key)
        out.append(e)
        if not parts:
            e.reason = "its key's parts are not known in this process (made by an earlier one)"
            continue
        same_key = [s for s in stored if frames_base(s.key) == frames_base(key)]
        refused = [s for s in same_key if s.signer != expected]
        if refused:  # it was there all along: refused for its signature
            e.nearest, e.signer = refused[0].key, refused[0].signer
            e.reason = f"the entry is there, signed with {e.signer or 'a secret not known here'} instead of {expected}"
            continue
        # an entry under this very key, signed as expected, was written after the lookup (by the
        # session itself, or a process beside it): the others are what the lookup could have found
        base = frames_base(key)
        kind = [s for s in stored if frames_base(s.key) != base and s.parts.get("kind") == parts.get("kind")]
        if not kind:
            e.reason = "the tier held no other entry of this kind" + (
                " (the one there now was written after this lookup)" if same_key else "")
            continue
        named = [s for s in kind if s.label == label]
        pool = named or kind
        s = min(pool, key=lambda c: (len(differing(parts, c.parts)), c.signer != expected))
        e.nearest, e.signer, e.differs = s.key, s.signer, differing(parts, s.parts)
        e.values = {p: (parts.get(p), s.parts.get(p)) for p in e.differs}
        whats = sorted({what(p) for p in e.differs})
        shown = "; ".join(f"{p}: {_short(a)} here, {_short(b)} there" for p, (a, b) in list(e.values.items())[:4])
        nearest = f"the nearest entry{'' if named else ' (another kernel or function)'}, {s.key[:12]}"
        e.reason = f"{', '.join(whats) or 'nothing in its parts'} differs from {nearest}"
        e.reason += f" ({shown})" if shown else ""
        if s.signer != expected:
            e.reason += f"; and it is signed with {s.signer or 'a secret not known here'}"
    return out


def _short(value: str | None) -> str:
    if value is None:
        return "absent"
    return value if len(value) <= 40 else value[:37] + "..."
