"""Node profiles: the parameter count of a shape, which documents are profiles, size matching."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from slo_operator.engine.profiles import (
    SIZE_TOLERANCE,
    NodeProfile,
    fp8_verdict,
    load_profiles,
    match_profiles,
    parse_profile,
    profile_files,
    shape_params_billion,
)

H200 = "H200-SXM-141GB"
# A toy decoder whose parameter count is exact: attention 8x2x4x2 + 8x1x4x2 = 192,
# MLP 3x8x16 = 384, two layers, embeddings 2x10x8 = 160.
TOY = {"hidden_size": 8, "intermediate_size": 16, "num_layers": 2, "num_heads": 2,
       "num_kv_heads": 1, "head_dim": 4, "vocab_size": 10}


def _doc(**kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"format": "slo-runtime-profile/v1", "device": "NVIDIA H200",
                           "model": dict(TOY)}
    doc.update(kw)
    return doc


def _profile(source: str, params: float, ctx: int = 1024, fp8: bool = True,
             product: str = H200) -> NodeProfile:
    return NodeProfile(source=source, device="NVIDIA H200", product=product, shape="s",
                       params_billion=params, ctx=ctx, fp8_recommended=fp8, knee_batch={})


@pytest.mark.parametrize(("change", "want"), [
    ({}, 1312),
    ({"num_kv_heads": None}, 1440),  # every head keeps its own K and V
    ({"head_dim": None}, 1312),  # hidden_size / num_heads = 4
    ({"head_dim": 2}, 2 * (8 * 2 * 2 * 2 + 8 * 1 * 2 * 2 + 384) + 160),
    ({"vocab_size": 20}, 1312 + 160),
    ({"intermediate_size": 32}, 1312 + 2 * 384),
    ({"num_layers": 3}, 1312 + 576),
])
def test_shape_params_billion(change: dict[str, Any], want: int) -> None:
    model = {k: v for k, v in {**TOY, **change}.items() if v is not None}
    assert shape_params_billion(model) * 1e9 == pytest.approx(want, abs=1e-6)


def test_shape_params_of_llama_3_1_8b() -> None:
    model = {"hidden_size": 4096, "intermediate_size": 14336, "num_layers": 32, "num_heads": 32,
             "num_kv_heads": 8, "head_dim": 128, "vocab_size": 128256}
    assert shape_params_billion(model) == pytest.approx(8.029995008, abs=1e-9)


def test_minimal_profile_and_its_defaults() -> None:
    got = parse_profile(_doc(), "x.json")
    assert got == NodeProfile(source="x.json", device="NVIDIA H200", product=H200, shape="",
                              params_billion=pytest.approx(1312e-9), ctx=0,
                              fp8_recommended=False, knee_batch={})


def test_full_profile() -> None:
    got = parse_profile(_doc(shape="toy", ctx="4096", fp8_recommended=1,
                             knee_batch={"bf16": "128", 8: 64}), "y.json")
    assert got is not None
    assert (got.shape, got.ctx, got.fp8_recommended) == ("toy", 4096, True)
    assert got.knee_batch == {"bf16": 128, "8": 64}
    assert parse_profile(_doc(knee_batch=None), "z.json") is not None


@pytest.mark.parametrize("data", [
    pytest.param([_doc()], id="not-a-mapping"),
    pytest.param("slo-runtime-profile/v1", id="a-string"),
    pytest.param({k: v for k, v in _doc().items() if k != "format"}, id="no-format"),
    pytest.param(_doc(format="slo-runtime-profile"), id="format-without-version"),
    pytest.param(_doc(format="x-slo-runtime-profile/v1"), id="format-prefixed"),
    pytest.param({k: v for k, v in _doc().items() if k != "device"}, id="no-device"),
    pytest.param({k: v for k, v in _doc().items() if k != "model"}, id="no-model"),
])
def test_what_is_no_profile(data: object) -> None:
    assert parse_profile(data, "x.json") is None


def test_any_format_version_is_a_profile() -> None:
    assert parse_profile(_doc(format="slo-runtime-profile/v2"), "x.json") is not None


def test_broken_profiles_are_skipped_whatever_breaks(tmp_path: Path) -> None:
    docs = {
        "a-no-hidden-size.json": _doc(model={k: v for k, v in TOY.items() if k != "hidden_size"}),
        "b-null-size.json": _doc(model={**TOY, "hidden_size": None}),
        "c-bad-ctx.json": _doc(ctx="long"),
        "d-knees-list.json": _doc(knee_batch=[1]),
        "e-good.json": _doc(),
        "f-not-json.json": "{",
    }
    for name, doc in docs.items():
        (tmp_path / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    (tmp_path / "g-good.txt").write_text(json.dumps(_doc()))
    assert [p.source for p in load_profiles(tmp_path)] == ["e-good.json"]
    assert list(profile_files(tmp_path)) == ["e-good.json"]


def test_profiles_load_in_name_order(tmp_path: Path) -> None:
    for name in ("b.json", "c.json", "a.json"):
        (tmp_path / name).write_text(json.dumps(_doc()))
    assert [p.source for p in load_profiles(tmp_path)] == ["a.json", "b.json", "c.json"]
    assert list(profile_files(tmp_path)) == ["a.json", "b.json", "c.json"]


def test_shipped_profiles_in_name_order() -> None:
    assert [p.source for p in load_profiles()] == [
        "h200-llama-3.1-70b-ctx1024.json",
        "h200-llama-3.1-8b-ctx1024.json",
        "h200-llama-3.1-8b-ctx4096.json",
    ]


def test_size_tolerance() -> None:
    assert SIZE_TOLERANCE == 1.5


@pytest.mark.parametrize(("size", "matched"), [
    (2.0, True), (3.0, True), (3.01, False), (2.0 / 1.5 + 0.001, True), (1.3, False),
])
def test_size_window(size: float, matched: bool) -> None:
    p = _profile("p.json", 2.0)
    assert match_profiles(H200, size, [p]) == ((p,) if matched else ())


def test_nothing_matches_sizes_that_are_not_positive() -> None:
    assert match_profiles(H200, 0.0, [_profile("p.json", 2.0)]) == ()
    assert match_profiles(H200, -1.0, [_profile("p.json", 2.0)]) == ()
    assert match_profiles(H200, 2.0, [_profile("p.json", 0.0)]) == ()
    assert match_profiles(H200, 2.0, [_profile("p.json", -2.0)]) == ()


def test_only_the_same_product_matches() -> None:
    other = _profile("o.json", 2.0, product="H100-SXM-80GB")
    same = _profile("s.json", 2.0)
    assert match_profiles(H200, 2.0, [other, same]) == (same,)


def test_nearest_size_wins_one_per_context_sorted() -> None:
    near_long = _profile("near-long.json", 2.5, ctx=4096)
    near_short = _profile("near-short.json", 2.5, ctx=1024)
    far = _profile("far.json", 2.0, ctx=512)
    assert match_profiles(H200, 2.4, [near_long, far, near_short]) == (near_short, near_long)
    # Sizes 1.2 times below and above are equally near (to rounding), one per context.
    below = _profile("below.json", 2.5, ctx=2048)
    above = _profile("above.json", 3.6, ctx=1024)
    assert match_profiles(H200, 3.0, [below, above]) == (above, below)


@pytest.mark.parametrize(("verdicts", "want"), [
    ((), None), ((True,), True), ((False,), False), ((True, True), True), ((True, False), False),
    ((False, True), False),
])
def test_fp8_verdict(verdicts: tuple[bool, ...], want: bool | None) -> None:
    matches = [_profile(f"{i}.json", 2.0, fp8=v) for i, v in enumerate(verdicts)]
    assert fp8_verdict(matches) is want


def test_profiles_of_models_below_a_billion_match() -> None:
    p = _profile("small.json", 0.5)
    assert match_profiles(H200, 0.5, [p]) == (p,)
    assert match_profiles(H200, 0.7, [p]) == (p,)
    assert match_profiles(H200, 0.8, [p]) == ()


def test_sizes_a_millionth_apart_in_log_distance_are_equally_near() -> None:
    above = _profile("above.json", 1.1, ctx=2)
    below = _profile("below.json", math.exp(-math.log(1.1) - 3e-7), ctx=1)
    assert match_profiles(H200, 1.0, [above, below]) == (below, above)
    further = _profile("further.json", math.exp(-math.log(1.1) - 3e-6), ctx=1)
    assert match_profiles(H200, 1.0, [above, further]) == (above,)


def test_profiles_are_frozen() -> None:
    p = _profile("p.json", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.ctx = 2  # type: ignore[misc]
