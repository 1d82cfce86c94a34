"""``torch.compile(model, backend="raycompile", mode=..., options=...)``: Inductor, with its kernel
compiles on the farm, taking ``mode`` and ``options`` exactly as ``backend="inductor"`` does.

Registered through the ``torch_dynamo_backends`` entry point, so it works without an import.
The first use enables the farm with settings from RAYCOMPILE_* variables (an embedded local Ray
unless RAYCOMPILE_ADDRESS / RAY_ADDRESS or a cluster running on this machine says otherwise);
``raycompile.disable()`` ends it.
"""

from __future__ import annotations

from typing import Any


def raycompile_backend(gm: Any, example_inputs: Any, mode: str | None = None,
                       options: dict[str, Any] | None = None) -> Any:
    """Compile ``gm`` as ``backend="inductor"`` with ``mode``/``options`` would, through the farm.

    Raises RuntimeError for an unknown option (as torch.compile does), and what ``enable()``
    raises for bad RAYCOMPILE_* settings."""
    import raycompile

    from .wrapper import compat

    if not raycompile.is_enabled():
        raycompile.enable()
    # Inductor's own backend object: the session's gate on it installs the farm's hooks first
    return compat.inductor_backend(mode, options)(gm, example_inputs)
