"""The cache key: one pure function of everything that changes a kernel's binary.

Inputs: the kernel source (Triton module text, or the C++ sources and the resolved command lines),
the torch / triton / ptxas versions, the target arch, and the settings Inductor passes with the job.

The CUDA device index is still part of a Triton kernel's source and so of its key: the cubin does
not depend on it, but the cached autotuner records it (``triton_meta['device']``) and would launch
on that device. Sharing one entry between ranks on cuda:0 and cuda:1 (pytorch#170123) needs those
fields rewritten on load; until then, correctness first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

KEY_VERSION = 1  # bump when the layout of what is cached changes


def kernel_key(
    kind: str,
    sources: Sequence[str],
    torch_version: str,
    triton_version: str,
    ptxas_version: str,
    arch: str,
    settings: Mapping[str, object],
) -> str:
    """sha256 hex digest naming a cache entry; equal inputs give equal keys, any change a new key."""
    doc = {
        "v": KEY_VERSION,
        "kind": kind,
        "sources": list(sources),
        "torch": torch_version,
        "triton": triton_version,
        "ptxas": ptxas_version,
        "arch": arch,
        "settings": {k: repr(settings[k]) for k in sorted(settings)},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
