"""Which processes lower a training frame's backward with its forward (``job_of_ranks``): a rank of
a job of several, whose waiters need whole frames before its step waits on them in a collective.
A job of one rank (``WORLD_SIZE=1``) lowers it at its first backward, as stock does."""

from __future__ import annotations

import pytest

from raycompile.wrapper.backwards import job_of_ranks


@pytest.mark.parametrize(("env", "lowered_with_forward"), [
    ({}, False),
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}, False),  # torchrun --nproc-per-node 1
    ({"RANK": "0", "WORLD_SIZE": "1"}, False),
    ({"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4"}, True),
    ({"RANK": "0", "WORLD_SIZE": "2"}, True),
    ({"WORLD_SIZE": "2"}, True),
    ({"RANK": "1"}, True),  # a rank without its job's size: taken as one of several
    ({"LOCAL_RANK": "0"}, True),
    ({"RANK": "x", "WORLD_SIZE": "n"}, False),  # not numbers: not torchrun's
])
def test_only_a_rank_of_a_job_of_several_lowers_its_backward_with_its_forward(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], lowered_with_forward: bool) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert job_of_ranks() is lowered_with_forward


def test_an_initialized_process_group_answers_for_the_job(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    """A process group of one (gloo, real) is a job of one rank whatever the environment says."""
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert job_of_ranks()  # the environment alone: a rank of a job of several
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        assert not job_of_ranks()
    finally:
        dist.destroy_process_group()
