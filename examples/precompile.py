"""`raycompile precompile` as a script, for launchers that run a script on the head node:

    ray submit cluster.yaml examples/precompile.py -- --spec ~/raycompile-src/examples/variants.yaml

It joins the cluster running on that node (``--address auto``, or RAY_ADDRESS when set) and
takes the same arguments as ``raycompile precompile``; its exit status is precompile's."""

from __future__ import annotations

import sys

from raycompile.cli import main

if __name__ == "__main__":
    sys.exit(main(["precompile", "--address", "auto", *sys.argv[1:]]))
