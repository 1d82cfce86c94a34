"""Which ranks share a single flight of compiled frames (``wrapper/flights._device_tag``): the
frames' tensor guards name the device index, so only ranks of one device may share one; on CPU
every rank does. The GPU case runs on the GPU machine."""

from __future__ import annotations

import pytest
import torch

from raycompile.wrapper.flights import _device_tag


def test_cpu_ranks_share_a_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CPU machine's case")
    for rank in ("0", "3"):
        monkeypatch.setenv("LOCAL_RANK", rank)
        assert _device_tag() == ""


@pytest.mark.gpu
def test_ranks_of_other_gpus_never_share_a_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("LOCAL_RANK", "0")
    first = _device_tag()
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's next rank: its own GPU, even before set_device
    assert _device_tag() != first
    torch.cuda.init()
    assert _device_tag().startswith(f"cuda{torch.cuda.current_device()}.")
