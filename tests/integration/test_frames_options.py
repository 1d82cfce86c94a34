"""What a compiled frame is keyed by, and what ``torch._dynamo.reset()`` clears, in one process:
sessions one after another over one cache dir, real ``torch.compile`` on CPU, no Ray
(``compile_jobs="local"``: Inductor's own workers build the kernels).

- ``backend="raycompile"`` hands mode and options to the backend, not to ``torch.compile``'s
  context: they are part of the key all the same. An entry compiled with some options never
  serves a compile with others, and an unknown option raises as ``backend="inductor"`` does;
- Inductor's global config is in the key (a loaded frame skips Inductor, whose own cache key
  would have held it); a custom pass with no ``uuid()`` makes the frame unkeyable: traced each
  time, as Inductor's FX-graph cache bypasses it;
- a loaded frame goes with ``torch._dynamo.reset()`` as a traced one does: afterwards another
  backend compiles the function (torch installs loaded frames past the tracker reset walks).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import raycompile

pytestmark = pytest.mark.slow  # a dozen real compiles


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + torch.cos(x).sum()


X = torch.linspace(-3, 3, 257)


@pytest.fixture
def session(tmp_path: pathlib.Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """``compile(**torch_compile_kwargs)``: a session of its own over this test's cache dir, a
    fresh Dynamo, one call; returns the session's stats (its entries are written at its end)."""
    cache_dir = str(tmp_path / "cache")

    def compile(**kw: Any) -> dict[str, Any]:
        raycompile.enable(cache_dir=cache_dir, address="", compile_jobs="local", shared_cache="none")
        try:
            torch._dynamo.reset()
            out = torch.compile(f, **kw)(X)
            torch.testing.assert_close(out, f(X))
            return raycompile.stats()
        finally:
            raycompile.disable()

    yield compile
    torch._dynamo.reset()


def loaded(s: dict[str, Any]) -> bool:
    return s["dynamo_hits"] == 1 and s["dynamo_frames_traced"] == 0


def traced(s: dict[str, Any]) -> bool:
    return s["dynamo_hits"] == 0 and s["dynamo_frames_traced"] >= 1


def test_the_raycompile_backends_options_are_in_the_key(session: Callable[..., dict[str, Any]]) -> None:
    assert traced(session(backend="raycompile", options={"epilogue_fusion": False}))
    assert loaded(s := session(backend="raycompile", options={"epilogue_fusion": False})), s
    assert traced(s := session(backend="raycompile")), s  # Inductor's defaults: another entry
    assert traced(s := session(backend="raycompile", mode="max-autotune-no-cudagraphs")), s
    assert loaded(s := session(backend="raycompile", mode="max-autotune-no-cudagraphs")), s
    with pytest.raises(Exception, match="Unexpected optimization option"):
        session(backend="raycompile", options={"no_such_option": 1})


def test_inductors_global_config_is_in_the_key_and_a_pass_without_uuid_is_never_saved(
        session: Callable[..., dict[str, Any]]) -> None:
    from torch._inductor import config

    assert traced(session())
    assert loaded(s := session()), s
    with config.patch(epilogue_fusion=False):
        assert traced(s := session()), s
        assert loaded(s := session()), s
    ran: list[int] = []

    def count(graph: torch.fx.Graph) -> None:  # a plain function: nothing names its code
        ran.append(1)

    with config.patch(post_grad_custom_post_pass=count):
        for _ in range(2):
            s = session()
            assert traced(s) and s["dynamo_unkeyed"] >= 1 and s["dynamo_published"] == 0, s
    assert len(ran) >= 2  # the pass ran in both sessions: nothing was loaded past it


def test_reset_drops_a_loaded_frame_so_another_backend_compiles(session: Callable[..., dict[str, Any]]) -> None:
    assert traced(session())
    assert loaded(s := session()), s  # ends with the loaded frame on f's code, raycompile off
    calls: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        calls.append(1)
        return gm.forward

    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, backend=backend)(X), f(X))
    assert calls == [1]
