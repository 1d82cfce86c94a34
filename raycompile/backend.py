"""``torch.compile(model, backend="raycompile")``: Inductor, with its kernel compiles on the farm.

Registered through the ``torch_dynamo_backends`` entry point, so it works without an import.
The first use enables the farm with settings from RAYCOMPILE_* variables (an embedded local Ray
unless RAYCOMPILE_ADDRESS / RAY_ADDRESS says otherwise); ``raycompile.disable()`` ends it.
"""

from __future__ import annotations

from typing import Any


def raycompile_backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    from torch._inductor.compile_fx import compile_fx

    import raycompile

    if not raycompile.is_enabled():
        raycompile.enable()
    return compile_fx(gm, example_inputs, **kwargs)
