"""An unreachable Ray: local compiles with one warning (fallback), or a quick clear error."""

from __future__ import annotations

import pytest
import torch
from farmrun import compile_fresh, compile_on_farm

import raycompile
from raycompile.errors import FarmUnavailableError
from raycompile.models import examples


def test_unreachable_ray_falls_back_to_local_compiles(caplog: pytest.LogCaptureFixture) -> None:
    model, args = examples()["reduction_tail"]
    out, s = compile_on_farm(model, args, address="127.0.0.1:1")
    assert s["jobs"] == 0 and s["fallbacks"] > 0
    torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)
    # one warning for the session (not one more per compile that falls back), with the reason the
    # pre-flight gave at once (not a time-out after Ray's retries)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("raycompile")]
    assert len(warnings) == 1, warnings
    assert "cannot reach Ray at 127.0.0.1:1: nothing answers there" in warnings[0], warnings
    assert s["ray_unavailable"].startswith("cannot reach Ray at 127.0.0.1:1: nothing answers there"), s


def test_unreachable_ray_without_fallback_fails_the_compile_quickly() -> None:
    """fallback=False: the first compile that needs the farm raises FarmUnavailableError (where
    Inductor waits on the kernel), and so does ready(); nothing hangs."""
    model, args = examples()["reduction_tail"]
    raycompile.enable(address="127.0.0.1:1", fallback=False)
    try:
        with pytest.raises(Exception) as info:
            compile_fresh(model, args)
        assert _caused_by(info.value, FarmUnavailableError), info.value
        assert "ray start --head" in str(_caused_by(info.value, FarmUnavailableError))
        with pytest.raises(FarmUnavailableError):
            raycompile.ready()
        assert raycompile.stats()["jobs"] == 0 and raycompile.stats()["fallbacks"] == 0
        assert "nothing answers there" in str(_caused_by(info.value, FarmUnavailableError))  # at once, no retries
    finally:
        raycompile.disable()


def _caused_by(error: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    """``error`` or the first exception of that ``kind`` in its chain (torch.compile wraps what a
    backend raised in BackendCompilerFailed)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
