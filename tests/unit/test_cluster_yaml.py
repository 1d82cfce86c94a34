"""cluster.yaml passes Ray's own cluster-launcher validation, installs the same pinned torch and
triton on every node, and offers the resources the farm places its work on."""

from __future__ import annotations

import copy
import pathlib
import re

import pytest
import yaml

from raycompile.orchestrator.remote import COMPILE_RESOURCE, GPU_RESOURCE

CLUSTER_YAML = pathlib.Path(__file__).parents[2] / "cluster.yaml"


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_ray_validates_it(config: dict) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))  # merges Ray's AWS defaults; no cloud calls
    validate_config(prepared)  # the launcher's JSON schema and its cross-field checks
    assert set(prepared["available_node_types"]) == {"head", "cpu_compile", "gpu_h100"}
    assert prepared["head_node_type"] == "head"


def test_every_node_installs_the_same_pinned_torch_and_triton(config: dict) -> None:
    from ray.autoscaler._private.util import prepare_config

    prepared = prepare_config(copy.deepcopy(config))
    for commands in (prepared["head_setup_commands"], prepared["worker_setup_commands"]):
        text = "\n".join(commands)
        torch_pins = re.findall(r"\btorch==([\w.+]+)", text)
        triton_pins = re.findall(r"\btriton==([\w.+]+)", text)
        assert len(torch_pins) == 1 and len(triton_pins) == 1, text
        assert re.fullmatch(r"2\.1[1-5]\.\d+", torch_pins[0])  # pyproject: torch>=2.11,<2.16
        assert "ray[default]==" in text and "pip install -q -e ~/raycompile-src" in text
    # no node type installs anything of its own that could make it differ
    assert not any("setup_commands" in t for t in config["available_node_types"].values())


def test_it_offers_the_resources_the_farm_uses(config: dict) -> None:
    types = config["available_node_types"]
    compile_nodes = [n for n, t in types.items() if t.get("resources", {}).get(COMPILE_RESOURCE, 0) >= 1]
    gpu_nodes = [n for n, t in types.items() if t.get("resources", {}).get(GPU_RESOURCE, 0) >= 1]
    assert "cpu_compile" in compile_nodes and gpu_nodes == ["gpu_h100"]
    assert types["gpu_h100"]["resources"][GPU_RESOURCE] == types["gpu_h100"]["resources"]["GPU"]
    assert COMPILE_RESOURCE not in types["head"].get("resources", {})  # the head compiles nothing
    assert types["cpu_compile"]["min_workers"] >= 1  # the resource exists when the first driver connects


def test_the_venv_is_not_uploaded(config: dict) -> None:
    assert ".venv" in config["rsync_exclude"] and config["file_mounts"]["~/raycompile-src"] == "."
