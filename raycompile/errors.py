"""raycompile's exceptions. Each says what went wrong and what to do next, and pickles
(``__reduce__``), so it survives a trip through Ray."""

from __future__ import annotations


class RaycompileError(Exception):
    """Base class of every error raycompile raises."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (self.__class__, self.args)


class CompileError(RaycompileError):
    """A kernel failed to compile on the farm."""

    def __init__(self, kernel: str, node: str, message: str) -> None:
        self.kernel, self.node, self.message = kernel, node, message
        super().__init__(kernel, node, message)

    def __str__(self) -> str:
        where = f" on node {self.node}" if self.node else ""
        return (
            f"kernel {self.kernel!r} failed to compile{where}:\n{self.message}\n"
            "The other kernels are unaffected. If the source is Inductor's, re-run with "
            "raycompile.disable() to see whether stock Inductor fails too, and report it."
        )


class VersionMismatchError(RaycompileError):
    """A worker runs another torch or triton than the driver; its binaries would be wrong."""

    def __init__(self, node: str, driver: str, worker: str) -> None:
        self.node, self.driver, self.worker = node, driver, worker
        super().__init__(node, driver, worker)

    def __str__(self) -> str:
        return (
            f"worker node {self.node} runs {self.worker}, but this driver runs {self.driver}. "
            "Install the same torch and triton on every node (cluster.yaml's setup_commands), "
            "or leave that node out of the cluster."
        )


class FarmUnavailableError(RaycompileError):
    """Ray could not be reached (or started) and local fallback was turned off. ``fix`` says what
    to do where the usual advice does not fit (a token Ray refused, a command that never starts a
    Ray of its own); None gives the usual advice."""

    ADVICE = ("Start a cluster with `ray start --head`, pass its address (address='host:6379', RAY_ADDRESS, "
              "or --address), or leave out the address to start an embedded local Ray.")

    def __init__(self, address: str, reason: str, fix: str | None = None) -> None:
        self.address, self.reason, self.fix = address, reason, fix
        super().__init__(address, reason, fix)

    def __str__(self) -> str:
        return f"cannot reach Ray at {self.address}: {self.reason.rstrip('.')}. {self.fix or self.ADVICE}"

    def advised(self, fix: str) -> FarmUnavailableError:
        """This error with ``fix`` as its advice, unless it carries advice of its own already."""
        return self if self.fix else FarmUnavailableError(self.address, self.reason, fix)


class KernelSourceError(RaycompileError):
    """A file or source is not an Inductor-generated Triton kernel raycompile can compile."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(path, reason)

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.reason}. Pass Inductor kernel modules (the .py files under "
            "TORCHINDUCTOR_CACHE_DIR or a debug dir that hold @triton.jit with triton_meta)."
        )


class UnknownArchError(RaycompileError, ValueError):
    """An arch raycompile cannot build for."""

    def __init__(self, arch: str, known: str) -> None:
        self.arch, self.known = arch, known
        super().__init__(arch, known)

    def __str__(self) -> str:
        return f"unknown arch {self.arch!r}: pass one of {self.known}"


class SettingsError(RaycompileError, ValueError):
    """A setting (argument or RAYCOMPILE_* variable) has a value raycompile cannot use."""


class SpecError(RaycompileError, ValueError):
    """A precompile spec (or its entry point) that raycompile cannot use."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(path, reason)

    def __str__(self) -> str:
        if self.path.endswith(".py"):  # the script of `raycompile precompile SCRIPT`
            return f"{self.path}: {self.reason}. Usage: raycompile precompile SCRIPT [-- ARGS]"
        return (
            f"{self.path}: {self.reason}. A spec is JSON or YAML: "
            '{"variants": [{"entry": "package.module:function", "inputs": [{"shape": [8, 96]}]}]} '
            "(see `raycompile precompile --help`)"
        )


class NoGPUError(RaycompileError):
    """A benchmark needs a GPU model the cluster has no GPU worker of."""

    def __init__(self, group: str, available: list[str]) -> None:
        self.group, self.available = group, list(available)
        super().__init__(group, self.available)

    def __str__(self) -> str:
        have = ", ".join(self.available) or "none"
        return (
            f"no GPU of {self.group} in the Ray cluster (GPU groups there: {have}). A benchmark runs only "
            "on the GPU model its kernel targets: add a node with that GPU (ray start --num-gpus N), or "
            "pass gpu= one of the groups to raycompile.autotune."
        )


class AutotuneError(RaycompileError):
    """Every config of a kernel failed on the GPU workers, or the kernel cannot be sent to them."""

    def __init__(self, kernel: str, message: str) -> None:
        self.kernel, self.message = kernel, message
        super().__init__(kernel, message)

    def __str__(self) -> str:
        return (
            f"autotuning {self.kernel!r} failed: {self.message}\n"
            "For a config that failed, run the kernel in this process with that config to see the full "
            "error, and leave out the configs this GPU cannot run (too many warps or stages, blocks too "
            "large for its shared memory). To be sent to the GPU workers, the grid and the kernel's globals "
            "must pickle with cloudpickle (module-level functions and plain values)."
        )
