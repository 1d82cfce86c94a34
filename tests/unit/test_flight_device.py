"""Which ranks share a single flight of compiled frames (``wrapper/flights._device_tag``): an
entry made on one CUDA device is moved to the loading rank's current device
(``compat.devices``), so ranks on different GPUs share a flight once each made its GPU the
current device; a rank whose current device is not its GPU (``LOCAL_RANK`` names another) flies
alone. On CPU every rank shares. The GPU cases run on the GPU machine."""

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
def test_ranks_that_set_their_gpu_share_a_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    torch.cuda.init()
    before = torch.cuda.current_device()
    try:
        for rank in (0, 1):
            torch.cuda.set_device(rank)
            monkeypatch.setenv("LOCAL_RANK", str(rank))
            assert _device_tag() == ""  # rank 0 on cuda:0 and rank 1 on cuda:1: one flight
        torch.cuda.set_device(0)
        monkeypatch.setenv("LOCAL_RANK", "1")  # its model on cuda:1, its current device cuda:0
        assert _device_tag() == "rank1"
    finally:
        torch.cuda.set_device(before)



@pytest.mark.gpu
def test_an_entry_made_where_this_process_holds_tensors_is_not_moved() -> None:
    from raycompile.wrapper.compat import devices

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    torch.cuda.set_device(0)
    held = torch.ones(2, device="cuda:1")  # a model moved to cuda:1 without set_device
    assert devices.uses(1) and devices.current_index() == 0
    del held
