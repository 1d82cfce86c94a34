"""An unreachable Ray: local compiles with one warning (fallback), or a quick clear error."""

from __future__ import annotations

import time

import pytest
import torch
from farmrun import compile_on_farm

import raycompile
from raycompile.errors import FarmUnavailableError
from raycompile.models import examples


def test_unreachable_ray_falls_back_to_local_compiles(caplog: pytest.LogCaptureFixture) -> None:
    model, args = examples()["reduction_tail"]
    start = time.monotonic()
    out, s = compile_on_farm(model, args, address="127.0.0.1:1")
    assert time.monotonic() - start < 120  # the pre-flight answers at once; the rest is the compile
    assert s["jobs"] == 0 and s["fallbacks"] > 0
    torch.testing.assert_close(out, model(*args), rtol=1e-5, atol=1e-5)
    assert "cannot reach Ray at 127.0.0.1:1" in caplog.text


def test_unreachable_ray_without_fallback_raises_quickly() -> None:
    start = time.monotonic()
    with pytest.raises(FarmUnavailableError, match="ray start --head"):
        raycompile.enable(address="127.0.0.1:1", fallback=False)
    assert time.monotonic() - start < 20 and not raycompile.is_enabled()
