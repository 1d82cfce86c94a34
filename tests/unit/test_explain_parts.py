"""cache/explain.py on entries written by the real FileTier: a miss is set against the nearest entry
of the same kind (the same label first), each differing part named; an entry that another secret
signs is named as such; a key's parts come from the key functions themselves."""

from __future__ import annotations

import pathlib

from raycompile.cache import Entry, explain, keys
from raycompile.cache.store import FileTier

SECRET, OTHER = b"s" * 32, b"o" * 32


def kernel(source: str, torch_version: str = "2.13.0", arch: str = "cuda:90:32", **settings: object) -> str:
    return keys.kernel_key("triton", [source], torch_version, "3.7.1", "12.8", arch, settings)


def store(tier: FileTier, key: str, label: str) -> None:
    parts = keys.parts_of(key)
    assert parts is not None
    tier.put(Entry(key, {"b": b"x"}, {"label": label, "parts": parts}))


def why(tier: FileTier, label: str, key: str) -> explain.Explained:
    secrets = {"ours": SECRET, "theirs": OTHER}
    return explain.explain([(label, key, keys.parts_of(key))], explain.read(tier.manifests(), secrets), "ours")[0]


def test_each_part_that_differs_is_named_against_the_nearest_entry(tmp_path: pathlib.Path) -> None:
    tier = FileTier(str(tmp_path), SECRET)
    store(tier, kernel("k0"), "triton_poi_0")
    store(tier, kernel("k1", num_stages=2), "triton_poi_1")
    e = why(tier, "triton_poi_0", kernel("k0", torch_version="2.15.0"))
    assert e.differs == ["torch"] and e.values == {"torch": ("2.15.0", "2.13.0")}, e
    assert e.reason.startswith("the torch version differs from the nearest entry, "), e.reason
    e = why(tier, "triton_poi_0", kernel("k0", arch="cuda:80:32"))
    assert e.differs == ["arch"] and "the GPU or CPU target" in e.reason, e
    # the same label wins over fewer differences: label triton_poi_1 is nearest, its option differs
    e = why(tier, "triton_poi_1", kernel("k1", num_stages=3))
    assert e.differs == ["option num_stages"] and "an Inductor option" in e.reason, e
    e = why(tier, "triton_new_7", kernel("k9"))  # no entry of that label: the nearest of the kind
    assert e.differs == ["source"] and "another kernel or function" in e.reason, e


def test_an_entry_signed_with_another_secret_is_named(tmp_path: pathlib.Path) -> None:
    key = kernel("k2")
    store(FileTier(str(tmp_path), OTHER), key, "triton_poi_2")
    e = why(FileTier(str(tmp_path), SECRET), "triton_poi_2", key)
    assert e.signer == "theirs" and e.reason == "the entry is there, signed with theirs instead of ours", e


def test_frames_parts_name_the_section_that_differs(tmp_path: pathlib.Path) -> None:
    def identity(gpu: str) -> dict[str, object]:
        return {"function": {"module": "m", "qualname": "f", "line": 3, "module_source": "ab"},
                "options": {"backend": "inductor"}, "config": {"inductor": {"x": "1"}},
                "system": {"torch": "2.11.0", "gpu": gpu}, "raycompile": "0.1", "tag": ["", "t"]}

    tier = FileTier(str(tmp_path), SECRET)
    stored = keys.frames_key(identity("NVIDIA H100 80GB HBM3"))
    tier.put(Entry(keys.frames_generation(stored, 0), {"entry": b"x"},
                   {"label": "compiled frames of m.f", "parts": keys.parts_of(stored)}))
    e = why(tier, "compiled frames of m.f", keys.frames_key(identity("NVIDIA H200")))
    assert e.differs == ["system gpu"] and e.values["system gpu"] == ("NVIDIA H200", "NVIDIA H100 80GB HBM3"), e
    assert e.reason.startswith("the GPU differs"), e.reason


def test_unknown_parts_and_an_empty_tier_say_so(tmp_path: pathlib.Path) -> None:
    tier = FileTier(str(tmp_path), SECRET)
    e = explain.explain([("k", "f" * 64, None)], [], "ours")[0]
    assert "not known in this process" in e.reason
    assert "held no other entry of this kind" in why(tier, "triton_poi_3", kernel("k3")).reason
