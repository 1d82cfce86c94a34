"""An unreachable Ray: local compiles with one warning (fallback), or a quick clear error."""

from __future__ import annotations

import time

import pytest
import torch

import raycompile
from raycompile.errors import FarmUnavailableError
from raycompile.models import examples
from raycompile.wrapper import compat


def test_unreachable_ray_falls_back_to_local_compiles(caplog: pytest.LogCaptureFixture) -> None:
    model, args = examples()["reduction_tail"]
    start = time.monotonic()
    raycompile.enable(address="127.0.0.1:1")
    try:
        assert time.monotonic() - start < 20
        torch._dynamo.reset()
        with compat.fresh_cache():
            out = torch.compile(model)(*args)
        s = raycompile.stats()
    finally:
        raycompile.disable()
    assert s["jobs"] == 0 and s["fallbacks"] > 0
    torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)
    assert "cannot reach Ray at 127.0.0.1:1" in caplog.text


def test_unreachable_ray_without_fallback_raises_quickly() -> None:
    start = time.monotonic()
    with pytest.raises(FarmUnavailableError, match="ray start --head"):
        raycompile.enable(address="127.0.0.1:1", fallback=False)
    assert time.monotonic() - start < 20 and not raycompile.is_enabled()
