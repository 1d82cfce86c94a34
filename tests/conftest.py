from __future__ import annotations

import os
import pathlib

import pytest

# Keep Ray quiet and small on 2-core CI machines.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

CORPUS = pathlib.Path(__file__).parent / "fixtures" / "corpus_torch211" / "kernels"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def corpus() -> pathlib.Path:
    return CORPUS


@pytest.fixture(scope="session")
def corpus_files() -> list[pathlib.Path]:
    return sorted(CORPUS.glob("*.py"))
