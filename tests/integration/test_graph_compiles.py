"""Whole-graph compiles on the cluster (``graph_compiles="cluster"``, wrapper/graph_compiles.py) on a real
local Ray (one 2-CPU node): a training step with three graph breaks (four forward graphs, four
backward graphs) compiled by Ray tasks, each with its own farm session in a Ray worker, checked
against stock Inductor compiled in this process with the same settings:

- loss, gradients and a second call bitwise equal; every graph compiled by a Ray task in a worker
  (none here), the backward graphs sent with their forward and waited for at their first call;
  the kernels built once, by the workers, and loaded here from the cache (no job of this process);
- a graph the out-of-process path cannot carry (a custom post-grad pass: Inductor's portable
  config drops it) is compiled here, counted with its reason, and the pass runs here;
- a graph compile that does not answer in time is compiled here, counted, with the same result.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest
import torch

import raycompile
from raycompile.wrapper import compat

pytestmark = pytest.mark.slow  # several real compiles of a model on 2 CPUs


class Breaks(torch.nn.Module):
    """Four regions split by graph breaks, each with its own ops (four different graphs)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 64)
        self.c = torch.nn.Linear(64, 48)
        self.d = torch.nn.Linear(48, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.a(x)).sin()
        torch._dynamo.graph_break()
        x = torch.tanh(self.b(x)) * 2
        torch._dynamo.graph_break()
        x = torch.nn.functional.gelu(self.c(x)) + x[:, :48].cos()
        torch._dynamo.graph_break()
        return self.d(x).square().mean()


def step() -> list[torch.Tensor]:
    """A training step and one more forward, compiled in a fresh Dynamo state with an empty
    Inductor cache: (loss, gradients..., second loss)."""
    torch.manual_seed(0)
    model, x = Breaks(), torch.randn(8, 32)
    torch.compiler.reset()
    with compat.fresh_cache():
        compiled = torch.compile(model)
        loss = compiled(x)
        loss.backward()
        again = compiled(x)
    return [loss.detach(), *(p.grad.clone() for p in model.parameters()), again.detach()]


@pytest.fixture(scope="module")
def stock() -> list[torch.Tensor]:
    """Stock Inductor's step (no farm), computed once for the tests that compare with it."""
    return step()


def equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def farm_step(tmp_path: pathlib.Path, graph_compiles: str = "cluster",
              **settings: Any) -> tuple[list[torch.Tensor], dict[str, Any]]:
    # one node, one cache dir: the workers' sessions fill it, this one reads it. Its entries are
    # signed with one secret: the workers (started before this test's XDG_CONFIG_HOME) have another
    # user key than this process (on a real node both read the same user's key)
    with raycompile.enabled(graph_compiles=graph_compiles, cache_dir=str(tmp_path / "rc"), shared_cache="none",
                            secret="graph-compiles-test", **settings):
        out = step()
        s = raycompile.stats()
        s["report"] = raycompile.report()
    return out, s


def test_graphs_compile_on_ray_workers_bitwise_stock(local_ray: None, tmp_path: pathlib.Path,
                                                     stock: list[torch.Tensor]) -> None:
    farm, s = farm_step(tmp_path)
    assert equal(farm, stock)
    assert s["graphs_sent"] == 8 and s["graphs_backward_deferred"] == 4, s  # 4 forward, 4 backward
    assert s["graphs_backward_early"] == 0, s  # each backward waited for at its call, not at its compile
    assert s["graphs_refused"] == s["graphs_failed"] == 0, s
    assert sum(s["graph_workers"].values()) == 8 and os.getpid() not in s["graph_workers"], s
    assert s["graph_compile_seconds"] > 0 and s["graph_wait_seconds"] > 0, s
    # the workers built every kernel (through their own farm sessions); this process loaded them
    # from the cache those sessions filled: no job of its own, no fallback
    assert s["graph_kernel_jobs"] >= 4, s
    assert s["jobs"] == s["jobs_local"] == s["fallbacks"] == 0 and s["local_hits"] >= s["graph_kernel_jobs"], s
    assert "whole graphs: 8 compiled on the cluster (4 backward" in s["report"], s["report"]


@pytest.mark.extended  # left out of CI's run (docs/testing.md): the graph jobs of "cluster" mode cover its path
def test_backward_mode_sends_only_the_backward_graphs(local_ray: None, tmp_path: pathlib.Path,
                                                      stock: list[torch.Tensor]) -> None:
    """``graph_compiles="backward"``: each forward graph is compiled here (Dynamo waits for it
    either way), each backward graph on the cluster while the step runs forward."""
    farm, s = farm_step(tmp_path, graph_compiles="backward")
    assert equal(farm, stock)
    assert s["graphs_forward_here"] == 4, s
    assert s["graphs_sent"] == s["graphs_backward_deferred"] == 4 and s["graphs_backward_early"] == 0, s
    assert s["graphs_refused"] == s["graphs_failed"] == 0, s
    assert os.getpid() not in s["graph_workers"] and s["graph_kernel_jobs"] >= 1, s  # the backward kernels
    # the forward graphs' kernels were built by this process's own farm path
    assert s["jobs"] + s["jobs_local"] >= 1 and s["fallbacks"] == 0, s
    assert "4 forward compiled here" in s["report"], s["report"]


class Counting:
    """A post-grad pass that counts the graphs it saw in this process (and changes nothing)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1

    def uuid(self) -> str:
        return "raycompile-test-counting-pass"


@pytest.mark.extended  # left out of CI's run (docs/testing.md): an edge of the graph jobs
def test_a_graph_with_a_custom_pass_is_compiled_here(local_ray: None, tmp_path: pathlib.Path) -> None:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Pass(Counting, CustomGraphPass):
        pass

    config = compat.inductor_config()
    stock_pass = Pass()
    with config.patch(post_grad_custom_post_pass=stock_pass):
        stock = step()
    farm_pass = Pass()
    with config.patch(post_grad_custom_post_pass=farm_pass):
        farm, s = farm_step(tmp_path)
    assert equal(farm, stock)
    assert farm_pass.calls == stock_pass.calls == 8  # every graph's pass ran in this process
    assert s["graphs_sent"] == 0 and s["graphs_refused"] == 8, s
    (why,) = s["graphs_refused_reasons"]
    assert "post_grad_custom_post_pass" in why, s


def test_a_graph_compile_that_does_not_answer_in_time_is_compiled_here(local_ray: None, tmp_path: pathlib.Path,
                                                                      stock: list[torch.Tensor]) -> None:
    # 50 ms: less than any graph's compile on the cluster (a C++ kernel's build alone takes longer).
    # Each forward waits at once and gives up; each backward from its call on, by when some may
    # have arrived (they compiled while the forward ran)
    farm, s = farm_step(tmp_path, graph_timeout_s=0.05)
    assert equal(farm, stock)
    graphs = {k: v for k, v in s.items() if "graph" in k}
    assert s["graphs_failed"] >= 4 and s["graphs_failed"] + s["graphs_sent"] == 8, graphs
    assert s["graphs_refused"] == 0, graphs


def test_graph_workers_are_warmed_at_enable_before_any_compile(local_ray: None, tmp_path: pathlib.Path) -> None:
    """A new Ray worker takes seconds to tens of seconds to join its farm session and import
    Inductor; that starts at ``enable()``, while the script builds its model, not at the first
    compile, where the first graph would wait for it."""
    from waiting import wait_until

    with raycompile.enabled(graph_compiles="cluster", cache_dir=str(tmp_path / "rc"), shared_cache="none",
                            secret="graph-compiles-test"):
        wait_until(lambda: raycompile.stats()["graph_workers_warmed"], 120, "a graph worker warmed")
        s = raycompile.stats()
    assert s["graph_workers_warmed"] >= 1, s  # one node of 2 CPUs: 1 graph at once
    assert s["graphs_sent"] == 0 and s["jobs"] == 0, s  # nothing compiled, nothing asked of Inductor
