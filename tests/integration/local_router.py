"""What the Router tests that compile on this node share: the session's start as it is on one
machine, and the corpus kernel they compile."""

from __future__ import annotations

from typing import Any

# a reduction (XBLOCK x R0_BLOCK) Inductor generated for an H100 (torch 2.11 corpus)
KERNEL = "c7v64y2hk3bj7jx7bksh5qct3sgwrnaslimos32k3fopact4ovks.py"


class CompilesHere:
    """The session's start as it is on one machine: no Ray, this node's compile workers."""

    farm = None
    dedupe = None

    def wait_farm(self) -> None:
        return None

    def compiles_here(self, farm: Any, wait: bool = False) -> bool:
        return True
