"""Node profiles decide what `precision: auto` means where one was measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.engine.profiles import (
    fp8_verdict,
    load_profiles,
    match_profiles,
    parse_profile,
    profile_files,
    shape_params_billion,
)
from slo_operator.reconcile.desired import ServicePlan, plan_service, pool_from_product
from tests.support.paths import REPO

ROOT = REPO
SHIPPED = ROOT / "operator" / "slo_operator" / "data" / "profiles"


def _profile(**kw: Any) -> dict[str, Any]:
    base = json.loads((ROOT / "profiles" / "h200-llama-3.1-8b-ctx1024.json").read_text())
    base.update(kw)
    return base


def test_packaged_profiles_are_what_generation_writes() -> None:
    shipped = {p.name: p.read_text() for p in SHIPPED.glob("*.json")}
    assert shipped == profile_files(ROOT / "profiles"), (
        f"{SHIPPED} is stale: run `make profiles` "
        "(slo-operator profiles --from profiles --out-dir operator/slo_operator/data/profiles)"
    )


def test_generation_takes_the_measured_profiles_only() -> None:
    # Beside them in profiles/: the probe, the plan (a JSON list) and the run's log.
    assert sorted(profile_files(ROOT / "profiles")) == [
        "h200-llama-3.1-70b-ctx1024.json",
        "h200-llama-3.1-8b-ctx1024.json",
        "h200-llama-3.1-8b-ctx4096.json",
    ]
    assert len(load_profiles(ROOT / "profiles")) == 3


def test_profile_files_leave_out_what_load_profiles_skips(tmp_path: Path) -> None:
    (tmp_path / "good.json").write_text(json.dumps(_profile()))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "bad-knees.json").write_text(json.dumps(_profile(knee_batch=[1])))
    (tmp_path / "unknown-gpu.json").write_text(json.dumps(_profile(device="Nonexistent X1")))
    (tmp_path / "notes.txt").write_text(json.dumps(_profile()))
    assert profile_files(tmp_path) == {"good.json": json.dumps(_profile())}
    assert [p.source for p in load_profiles(tmp_path)] == ["good.json"]


def test_shipped_profiles_load_and_resolve_to_the_catalogue() -> None:
    profiles = load_profiles()
    assert {p.product for p in profiles} == {"H200-SXM-141GB"}
    sizes = sorted({round(p.params_billion) for p in profiles})
    assert sizes == [8, 71]  # Llama-3.1-8B and -70B shapes, embeddings included


@pytest.mark.parametrize(
    ("model", "want_billion"),
    [
        pytest.param({"hidden_size": 4096, "intermediate_size": 14336, "num_layers": 32,
                      "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                      "vocab_size": 128256}, 8.03, id="llama-3.1-8b"),
        pytest.param({"hidden_size": 8192, "intermediate_size": 28672, "num_layers": 80,
                      "num_heads": 64, "num_kv_heads": 8, "vocab_size": 128256}, 70.55,
                     id="llama-3.1-70b-head-dim-derived"),
    ],
)
def test_shape_params(model: dict[str, Any], want_billion: float) -> None:
    assert shape_params_billion(model) == pytest.approx(want_billion, rel=0.01)


@pytest.mark.parametrize(
    ("product", "size", "want_sources"),
    [
        pytest.param("H200-SXM-141GB", 8, {"a.json", "b.json"}, id="same-gpu-same-size"),
        pytest.param("H200-SXM-141GB", 11, {"a.json", "b.json"}, id="within-tolerance"),
        pytest.param("H200-SXM-141GB", 13, set(), id="too-far-in-size"),
        pytest.param("H100-SXM-80GB", 8, set(), id="other-gpu"),
    ],
)
def test_match_profiles(product: str, size: float, want_sources: set[str]) -> None:
    profiles = [parse_profile(_profile(), "a.json"), parse_profile(_profile(ctx=4096), "b.json")]
    got = match_profiles(product, size, [p for p in profiles if p])
    assert {p.source for p in got} == want_sources


def test_verdict_needs_every_matching_profile() -> None:
    yes = parse_profile(_profile(), "yes.json")
    no = parse_profile(_profile(fp8_recommended=False, ctx=4096), "no.json")
    assert yes and no
    assert fp8_verdict([]) is None
    assert fp8_verdict([yes]) is True
    assert fp8_verdict([yes, no]) is False


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"format": "other"}, id="not-a-profile"),
        pytest.param(_profile(device="Mystery GPU 9000"), id="unknown-device"),
    ],
)
def test_unusable_files_are_skipped(data: dict[str, Any]) -> None:
    assert parse_profile(data, "x.json") is None


def test_broken_files_do_not_stop_loading(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "good.json").write_text(json.dumps(_profile()))
    assert [p.source for p in load_profiles(tmp_path)] == ["good.json"]


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
        pytest.param("auto", True, "fp8", "FP8 kept", id="profile-confirms-fp8"),
        pytest.param("auto", False, None, "FP8 weights off", id="profile-finds-no-gain"),
        pytest.param("fp8", False, "fp8", None, id="explicit-fp8-is-the-users-call"),
    ],
)
def test_profile_decides_auto_precision(precision: str, recommended: bool,
                                        want_quant: str | None, want_note: str | None) -> None:
    profile = parse_profile(_profile(fp8_recommended=recommended), "p.json")
    plan = _plan(precision, [profile])
    assert plan.engine.quantization == want_quant
    profile_notes = [n for n in plan.notes if "node profile" in n]
    if want_note:
        assert profile_notes and profile_notes[0].startswith(want_note)
    else:
        assert not profile_notes


def test_without_profile_the_hardware_rule_stands() -> None:
    assert _plan("auto", []).engine.quantization == "fp8"
