"""Node profiles: which documents are profiles, the parameter count of a shape, size matching,
and how a matching profile decides what `precision: auto` means."""

from __future__ import annotations

import dataclasses
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.engine.profiles import (
    NodeProfile,
    fp8_verdict,
    load_profiles,
    match_profiles,
    parse_profile,
    profile_files,
    shape_params_billion,
)
from slo_operator.reconcile.desired import ServicePlan, plan_service, pool_from_product
from tests.support.golden import Golden

# The profiles the operator ships (package data), not the repository's working copies.
PACKAGED = resources.files("slo_operator") / "data" / "profiles"
PACKAGED_NAMES = [
    "h200-llama-3.1-70b-ctx1024.json",
    "h200-llama-3.1-8b-ctx1024.json",
    "h200-llama-3.1-8b-ctx4096.json",
]
H200 = "H200-SXM-141GB"
# A toy decoder whose parameter count is exact: attention 8x2x4x2 + 8x1x4x2 = 192,
# MLP 3x8x16 = 384, two layers, embeddings 2x10x8 = 160.
TOY = {"hidden_size": 8, "intermediate_size": 16, "num_layers": 2, "num_heads": 2,
       "num_kv_heads": 1, "head_dim": 4, "vocab_size": 10}


def case_id(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.id)


def _packaged_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in PACKAGED.iterdir() if p.name.endswith(".json")}


def _measured(**kw: Any) -> dict[str, Any]:
    """A real measured profile (H200, Llama-3.1-8B at 1024 tokens), changed by ``kw``."""
    base: dict[str, Any] = json.loads(
        (PACKAGED / "h200-llama-3.1-8b-ctx1024.json").read_text())
    base.update(kw)
    return base


def _doc(**kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"format": "slo-runtime-profile/v1", "device": "NVIDIA H200",
                           "model": dict(TOY)}
    doc.update(kw)
    return doc


def _profile(source: str, params: float, ctx: int = 1024, fp8: bool = True,
             product: str = H200) -> NodeProfile:
    return NodeProfile(source=source, device="NVIDIA H200", product=product, shape="s",
                       params_billion=params, ctx=ctx, fp8_recommended=fp8, knee_batch={})


def _write(directory: Path, files: dict[str, object]) -> None:
    for name, doc in files.items():
        (directory / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))


# ------------------------------------------------------------------ the shipped profiles


def test_shipped_profiles_load_in_name_order_and_resolve_to_the_catalogue() -> None:
    profiles = load_profiles()
    assert [p.source for p in profiles] == PACKAGED_NAMES
    assert {p.product for p in profiles} == {H200}
    sizes = sorted({round(p.params_billion) for p in profiles})
    assert sizes == [8, 71]  # Llama-3.1-8B and -70B shapes, embeddings included


def test_packaged_profiles_are_exactly_what_generation_selects(tmp_path: Path) -> None:
    # `slo-operator profiles` writes what profile_files selects: every packaged file is a
    # node profile, so selecting again changes nothing.
    shipped = _packaged_texts()
    assert sorted(shipped) == PACKAGED_NAMES
    _write(tmp_path, dict(shipped))
    assert profile_files(tmp_path) == shipped


def test_generation_takes_the_measured_profiles_only(tmp_path: Path) -> None:
    # Beside the profiles of a run: the probe, the plan (a JSON list) and the run's log.
    _write(tmp_path, {
        **_packaged_texts(),
        "h200-probe.json": {"expected": {}, "gpu": {}, "matches": True, "mismatches": []},
        "plan-h200.json": [{"model": "m"}],
        "h200-profile.log": "profiling...",
    })
    assert sorted(profile_files(tmp_path)) == PACKAGED_NAMES
    assert [p.source for p in load_profiles(tmp_path)] == PACKAGED_NAMES


def test_broken_profiles_are_skipped_whatever_breaks(tmp_path: Path) -> None:
    _write(tmp_path, {
        "a-no-hidden-size.json": _doc(model={k: v for k, v in TOY.items()
                                             if k != "hidden_size"}),
        "b-null-size.json": _doc(model={**TOY, "hidden_size": None}),
        "c-bad-ctx.json": _doc(ctx="long"),
        "d-knees-list.json": _doc(knee_batch=[1]),
        "e-good.json": _doc(),
        "f-not-json.json": "{",
        "g-list.json": [1, 2],
        "h-unknown-gpu.json": _doc(device="Nonexistent X1"),
        "i-good.txt": _doc(),
    })
    assert [p.source for p in load_profiles(tmp_path)] == ["e-good.json"]
    assert list(profile_files(tmp_path)) == ["e-good.json"]


def test_profiles_load_in_name_order(tmp_path: Path) -> None:
    _write(tmp_path, {name: _doc() for name in ("b.json", "c.json", "a.json")})
    assert [p.source for p in load_profiles(tmp_path)] == ["a.json", "b.json", "c.json"]
    assert list(profile_files(tmp_path)) == ["a.json", "b.json", "c.json"]


# ------------------------------------------------------------------ one document


@pytest.mark.parametrize(("change", "want"), [
    pytest.param({}, 1312, id="toy-decoder"),
    pytest.param({"num_kv_heads": None}, 1440, id="every-head-keeps-its-own-k-and-v"),
    pytest.param({"head_dim": None}, 1312, id="head-dim-is-hidden-over-heads"),
    pytest.param({"head_dim": 2}, 2 * (8 * 2 * 2 * 2 + 8 * 1 * 2 * 2 + 384) + 160,
                 id="explicit-head-dim"),
    pytest.param({"vocab_size": 20}, 1312 + 160, id="embeddings-in-and-out"),
    pytest.param({"intermediate_size": 32}, 1312 + 2 * 384, id="mlp-per-layer"),
    pytest.param({"num_layers": 3}, 1312 + 576, id="one-more-layer"),
])
def test_shape_params_billion(change: dict[str, Any], want: int) -> None:
    shape = {k: v for k, v in {**TOY, **change}.items() if v is not None}
    assert shape_params_billion(shape) * 1e9 == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    ("shape", "want_billion"),
    [
        pytest.param({"hidden_size": 4096, "intermediate_size": 14336, "num_layers": 32,
                      "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                      "vocab_size": 128256}, 8.029995008, id="llama-3.1-8b"),
        pytest.param({"hidden_size": 8192, "intermediate_size": 28672, "num_layers": 80,
                      "num_heads": 64, "num_kv_heads": 8, "vocab_size": 128256},
                     70.552387584, id="llama-3.1-70b-head-dim-derived"),
    ],
)
def test_shape_params_of_published_models(shape: dict[str, Any], want_billion: float) -> None:
    assert shape_params_billion(shape) == pytest.approx(want_billion, abs=1e-9)


def test_minimal_profile_reads_missing_fields_as_empty() -> None:
    got = parse_profile(_doc(), "x.json")
    assert got == NodeProfile(source="x.json", device="NVIDIA H200", product=H200, shape="",
                              params_billion=pytest.approx(1312e-9),  # type: ignore[arg-type]
                              ctx=0,
                              fp8_recommended=False, knee_batch={})


def test_full_profile_values_are_normalised() -> None:
    got = parse_profile(_doc(shape="toy", ctx="4096", fp8_recommended=1,
                             knee_batch={"bf16": "128", 8: 64}), "y.json")
    assert got is not None
    assert (got.shape, got.ctx, got.fp8_recommended) == ("toy", 4096, True)
    assert got.knee_batch == {"bf16": 128, "8": 64}
    assert parse_profile(_doc(knee_batch=None), "z.json") is not None


@pytest.mark.parametrize("data", [
    pytest.param([_doc()], id="not-a-mapping"),
    pytest.param("slo-runtime-profile/v1", id="a-string"),
    pytest.param({"format": "other"}, id="another-format"),
    pytest.param({k: v for k, v in _doc().items() if k != "format"}, id="no-format"),
    pytest.param(_doc(format="slo-runtime-profile"), id="format-without-version"),
    pytest.param(_doc(format="x-slo-runtime-profile/v1"), id="format-prefixed"),
    pytest.param({k: v for k, v in _doc().items() if k != "device"}, id="no-device"),
    pytest.param({k: v for k, v in _doc().items() if k != "model"}, id="no-model"),
    pytest.param(_doc(device="Mystery GPU 9000"), id="unknown-device"),
])
def test_what_is_no_profile(data: object) -> None:
    assert parse_profile(data, "x.json") is None


def test_any_format_version_is_a_profile() -> None:
    assert parse_profile(_doc(format="slo-runtime-profile/v2"), "x.json") is not None


def test_profiles_are_frozen() -> None:
    p = _profile("p.json", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.ctx = 2  # type: ignore[misc]


# ------------------------------------------------------------------ matching


@pytest.mark.parametrize(
    ("product", "size", "want_sources"),
    [
        pytest.param(H200, 8, {"a.json", "b.json"}, id="same-gpu-same-size"),
        pytest.param(H200, 11, {"a.json", "b.json"}, id="within-tolerance"),
        pytest.param(H200, 13, set(), id="too-far-in-size"),
        pytest.param("H100-SXM-80GB", 8, set(), id="other-gpu"),
    ],
)
def test_measured_profiles_match_by_gpu_and_size(product: str, size: float,
                                                 want_sources: set[str]) -> None:
    profiles = [parse_profile(_measured(), "a.json"),
                parse_profile(_measured(ctx=4096), "b.json")]
    got = match_profiles(product, size, [p for p in profiles if p])
    assert {p.source for p in got} == want_sources


@pytest.mark.parametrize(("size", "want_matched"), [
    pytest.param(2.0, True, id="same-size"),
    pytest.param(3.0, True, id="1.5-times-larger"),
    pytest.param(3.01, False, id="just-beyond-1.5-times-larger"),
    pytest.param(2.0 / 1.5 + 0.001, True, id="just-within-1.5-times-smaller"),
    pytest.param(1.3, False, id="beyond-1.5-times-smaller"),
])
def test_size_window_is_a_factor_of_1_5(size: float, want_matched: bool) -> None:
    p = _profile("p.json", 2.0)
    assert match_profiles(H200, size, [p]) == ((p,) if want_matched else ())


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


@pytest.mark.parametrize(("verdicts", "want"), [
    pytest.param((), None, id="no-profile-no-verdict"),
    pytest.param((True,), True, id="one-recommends"),
    pytest.param((False,), False, id="one-advises-against"),
    pytest.param((True, True), True, id="all-recommend"),
    pytest.param((True, False), False, id="one-of-two-advises-against"),
    pytest.param((False, True), False, id="first-of-two-advises-against"),
])
def test_fp8_verdict_needs_every_matching_profile(verdicts: tuple[bool, ...],
                                                  want: bool | None) -> None:
    matches = [_profile(f"{i}.json", 2.0, fp8=v) for i, v in enumerate(verdicts)]
    assert fp8_verdict(matches) is want


# ------------------------------------------------------------------ through the planner


def _plan(precision: str, profiles: Any) -> ServicePlan:
    spec = InferenceServiceSpec.model_validate({
        "model": {"name": "org/m", "sizeBillions": 8, "maxModelLen": 4096},
        "hardware": {"gpuProducts": ["H200"]}, "engine": {"precision": precision}})
    pool = pool_from_product("H200")
    assert pool
    plan = plan_service(name="s", namespace="n", uid="u", spec=spec, policy=SLOPolicySpec(),
                        policy_name="", pools=[pool], replicas=1, profiles=profiles)
    assert isinstance(plan, ServicePlan)
    return plan


@pytest.mark.parametrize(
    ("precision", "recommended", "want_quant", "want_note"),
    [
        pytest.param("auto", True, "fp8", True, id="profile-confirms-fp8"),
        pytest.param("auto", False, None, True, id="profile-finds-no-gain"),
        pytest.param("fp8", False, "fp8", False, id="explicit-fp8-is-the-users-call"),
    ],
)
def test_profile_decides_auto_precision(precision: str, recommended: bool,
                                        want_quant: str | None, want_note: bool,
                                        golden: Golden, request: pytest.FixtureRequest) -> None:
    profile = parse_profile(_measured(fp8_recommended=recommended), "p.json")
    plan = _plan(precision, [profile])
    assert plan.engine.quantization == want_quant
    profile_notes = [n for n in plan.notes if "node profile" in n]
    assert len(profile_notes) == (1 if want_note else 0)
    if want_note:
        golden.check("engine", f"profiles-{case_id(request)}", profile_notes[0])


def test_without_profile_the_hardware_rule_stands() -> None:
    assert _plan("auto", []).engine.quantization == "fp8"
