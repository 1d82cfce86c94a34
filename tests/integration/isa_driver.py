"""One process of tests/integration/test_isa_libraries.py, in its own Inductor cache dir
(TORCHINDUCTOR_CACHE_DIR): ``record`` checks this CPU's vector instruction sets with the checks
recorded (``compat.isa``) and saves the ISA Inductor picked and the libraries' blobs; ``load``
installs those blobs, forbids every C++ build (a build raises), checks again and saves its pick."""

from __future__ import annotations

import pickle
import sys


def checked(cpu_vec_isa: object) -> list[tuple[str, str]]:
    """Inductor's pick, then each valid set with its build flags (which name every C++ kernel:
    a bf16 or AMX-fp16 check that failed would change them, not the set's name)."""
    picked = cpu_vec_isa.pick_vec_isa()  # type: ignore[attr-defined]
    return [(str(picked), picked.build_arch_flags())] + [
        (str(isa), isa.build_arch_flags()) for isa in cpu_vec_isa.valid_vec_isa_list()]  # type: ignore[attr-defined]


def no_builds(cpp_builder: object) -> list[str]:
    """Forbid every C++ build from here on (a check that must build fails); the builds asked for."""
    builds: list[str] = []

    def no_build(self: object, *args: object, **kwargs: object) -> None:
        builds.append(str(self))  # counted here: Inductor's check swallows what a build raises
        raise AssertionError("a check library was built again")

    cpp_builder.CppBuilder.build = no_build  # type: ignore[attr-defined]
    return builds


def shared(mode: str, path: str) -> None:
    """``share-record`` / ``share-load``: the checks with the session's exchange of libraries
    through a real signed file tier (``SHARED`` in the environment), no compiled frames."""
    import os

    from torch._inductor import cpp_builder, cpu_vec_isa

    from raycompile.cache import Cache
    from raycompile.cache.isa import isa_exchange
    from raycompile.observe.stats import Stats
    from raycompile.wrapper import compat

    stats = Stats()
    cache = Cache.from_settings(os.environ["LOCAL_TIER"], os.environ["SHARED"], None, stats)
    builds = no_builds(cpp_builder) if mode == "share-load" else []
    with compat.isa.isa_checks_recorded(*isa_exchange(cache, stats)):
        picked = checked(cpu_vec_isa)
    got = stats.snapshot()
    with open(path, "wb") as f:
        pickle.dump({"picked": picked, "builds": builds, "fetched": got.get("isa_libraries_fetched", 0),
                     "published": got.get("isa_libraries_published", 0)}, f)


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    if mode.startswith("share-"):
        shared(mode, path)
        return
    from torch._inductor import cpp_builder, cpu_vec_isa

    from raycompile.wrapper import compat

    if mode == "record":
        with compat.isa.isa_checks_recorded():
            picked = checked(cpu_vec_isa)
        saved = {"picked": picked, "blobs": compat.isa.isa_libraries()}
    else:
        with open(path, "rb") as f:
            got = pickle.load(f)
        written = compat.isa.install_isa_libraries(got["blobs"])
        builds = no_builds(cpp_builder)
        saved = {"picked": checked(cpu_vec_isa), "written": written, "builds": builds,
                 "again": compat.isa.install_isa_libraries(got["blobs"])}
        path += ".load"
    with open(path, "wb") as f:
        pickle.dump(saved, f)


if __name__ == "__main__":
    main()
