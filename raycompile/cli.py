"""The ``raycompile`` command (also ``python -m raycompile``)."""

from __future__ import annotations

import argparse
import sys

from .errors import RaycompileError

EXAMPLES = {
    "demo": "example: raycompile demo            # embedded local Ray, three models, checked vs eager",
    "compile-kernels": (
        "example: raycompile compile-kernels /tmp/torchinductor_$USER --arch sm_90 --out ./triton-cache\n"
        "         then point TRITON_CACHE_DIR at ./triton-cache on the GPU nodes"
    ),
}


def versions() -> str:
    """raycompile's version and those of the torch, triton and Ray it runs with, as installed here
    (read from package metadata: no import of torch, which takes seconds)."""
    from importlib import metadata

    from . import __version__
    from .kernels.jobs import Versions

    installed = Versions.installed()
    try:
        ray = metadata.version("ray")
    except metadata.PackageNotFoundError:
        ray = "none"
    return (f"raycompile {__version__} (torch {installed.torch}, triton {installed.triton}, ray {ray}, "
            f"python {sys.version.split()[0]})")


class _VersionAction(argparse.Action):
    """``--version``: the versions are looked up only when asked for, not on every command."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the versions of raycompile, torch, triton "
                                                            "and Ray, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(versions())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="raycompile", description="A compile farm for torch.compile on Ray.")
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile real models through the farm and check them",
                          epilog=EXAMPLES["demo"], formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--address", help="Ray address (default: an embedded local Ray)")
    demo.add_argument("--num-cpus", type=int, help="CPUs of the embedded local Ray")
    ck = sub.add_parser("compile-kernels", help="compile Inductor Triton kernel sources on the farm",
                        epilog=EXAMPLES["compile-kernels"],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ck.add_argument("paths", nargs="+", metavar="PATH", help="kernel files or dirs to search")
    ck.add_argument("--address", help="Ray address (default: an embedded local Ray)")
    ck.add_argument("--arch", help="target, e.g. sm_90 (default: the arch recorded in each source)")
    ck.add_argument("--out", help="write the Triton cache groups here (a TRITON_CACHE_DIR for GPU nodes)")
    ck.add_argument("--num-cpus", type=int, help="CPUs of the embedded local Ray")
    ck.add_argument("--job-timeout", type=float, help="seconds one kernel may take")
    from .cli_cache import add_parser
    from .cli_cluster import add_parsers

    add_parser(sub)  # `cache ACTION`: its actions are subcommands of their own, each with --help
    add_parsers(sub)
    from .cli_cache import EXAMPLES as CACHE_EXAMPLES
    from .cli_cache import HELP as CACHE_HELP

    ex = sub.add_parser("explain", help=CACHE_HELP["explain"] + " (as `cache explain`)",
                        epilog=CACHE_EXAMPLES["explain"].replace("raycompile cache explain", "raycompile explain"),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("--json", action="store_true", help="print the explanations as JSON")
    ex.add_argument("--dir", help="the local tier (default: RAYCOMPILE_CACHE_DIR or ~/.cache/raycompile)")
    ex.add_argument("--shared", metavar="URL",
                    help="set the misses against this shared tier: file:///path, redis://host:port/db or ray://head")
    return p


def _compile_kernels(args: argparse.Namespace) -> int:
    from .observe.progress import Progress
    from .observe.progress import wanted as progress_wanted
    from .observe.report import summary
    from .orchestrator import Farm
    from .orchestrator.batch import compile_kernels
    from .session import write_trace
    from .settings import Settings
    from .wrapper import compat
    from .wrapper.job_keys import triton_job
    from .wrapper.kernel_sources import scan

    arch = compat.parse_arch(args.arch) if args.arch else None  # bad arch: exit 2 before starting Ray
    found = scan(args.paths)
    sources = found.kernels
    if not sources:
        skipped = f" ({found.skipped()})" if found.skipped() else ""
        print(f"raycompile: no Inductor Triton kernels under {' '.join(args.paths)}{skipped}", file=sys.stderr)
        return 2
    settings = Settings.resolve(address=args.address, num_cpus=args.num_cpus,
                                job_timeout_s=args.job_timeout, fallback=False)
    progress = Progress(force_terminal=settings.progress is True) if progress_wanted(settings.progress) else None
    jobs, unreadable = [], []
    for s in sources:
        try:
            jobs.append(triton_job(s.name, compat.retarget(s.source, arch) if arch else s.source))
        except ValueError as e:  # a source without the target the farm compiles for
            unreadable.append(f"FAILED {s.name} ({s.path}): {e}")
    if unreadable and not jobs:
        print("\n".join(unreadable), file=sys.stderr)
        return 2
    with Farm(settings, progress=progress, toolchain=compat.TOOLCHAIN) as farm:
        report = compile_kernels(farm, jobs, args.out)
        names = {n: info["hostname"] for n, info in farm.nodes.items()}
    records = farm.stats.job_records()
    if settings.trace:
        write_trace(settings.trace, records, names)
    print(summary(farm.stats.snapshot(), records, names))
    for failure in report.failed:
        node = f" on node {failure.node_id[:12]}" if failure.node_id else ""
        print(f"FAILED {failure.label}{node}: {failure.message.strip().splitlines()[-1][:300]}")
    for line in unreadable:
        print(line)
    if found.skipped():
        print(found.skipped())
    print(report.line())
    return 1 if report.failed or unreadable else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(args.address, args.num_cpus)
        if args.command == "explain" or (args.command == "cache" and args.cache_command == "explain"):
            from .cli_explain import explain_misses

            return explain_misses(args)
        if args.command == "cache":
            from .cli_cache import run

            return run(args)
        if args.command in ("precompile", "status"):
            from .cli_cluster import run_precompile, run_status

            return run_precompile(args) if args.command == "precompile" else run_status(args)
        return _compile_kernels(args)
    except RaycompileError as e:
        print(f"raycompile: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
