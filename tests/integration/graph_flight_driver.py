"""One rank of the whole-graph single-flight test (run as a script): compiles the two-frame CPU
training step of ``frames_driver.py`` with compiled frames off and the backward lowered with the
forward (as compiled frames have it), jobs in Inductor's own workers, the node's cache dir shared with the other ranks;
saves its stats, Inductor's and AOTAutograd's own cache counters, loss and gradients.

    python graph_flight_driver.py CACHE_DIR OUT.pt [stock]

With ``stock`` it compiles the step with stock Inductor instead (raycompile never enabled)."""

from __future__ import annotations

import sys

import torch
import torch._functorch.config
from frames_driver import step

import raycompile


def main(cache_dir: str, out_path: str, stock: str = "") -> None:
    torch._functorch.config.force_non_lazy_backward_lowering = True
    if stock:
        torch.save({"result": step(8, torch.compile)}, out_path)
        return
    raycompile.enable(address="", compile_jobs="local", dynamo_cache=False, cache_dir=cache_dir)
    try:
        result = step(8, torch.compile)
    finally:
        raycompile.disable()
    from torch._dynamo.utils import counters

    torch.save({"stats": raycompile.stats(), "result": result, "report": raycompile.report(),
                "lowered": int(counters["inductor"]["fxgraph_cache_miss"]),
                "aot_hits": int(counters["aot_autograd"]["autograd_cache_hit"]),
                "graphs_traced": int(counters["stats"]["unique_graphs"])}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
