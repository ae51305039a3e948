"""API models: defaults, and errors that name the field (the same rules CEL enforces)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slo_operator.api.errors import field_problems
from slo_operator.api.models import (
    InferenceServiceSpec,
    SLOPolicySpec,
    dump,
    parse_duration,
)

MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct", "sizeBillions": 8}


def _errors(cls: Any, data: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as exc:
        cls.model_validate(data)
    return [str(p) for p in field_problems(exc.value)]


@pytest.mark.parametrize(
    ("cls", "data", "want_field", "want_text"),
    [
        pytest.param(InferenceServiceSpec, {"model": {"name": "m"}},
                     "spec.model.sizeBillions", "required", id="missing-model-size"),
        pytest.param(InferenceServiceSpec, {"model": {**MODEL, "sizeBillions": -1}},
                     "spec.model.sizeBillions", "greater than 0", id="negative-model-size"),
        pytest.param(InferenceServiceSpec, {"model": MODEL, "engine": {"precision": "fp4"}},
                     "spec.engine.precision", "'auto', 'bf16', 'fp16' or 'fp8'",
                     id="unknown-precision"),
        pytest.param(InferenceServiceSpec, {"model": MODEL, "engine": {"kvCacheDtype": "int3"}},
                     "spec.engine.kvCacheDtype", "fp8_e4m3", id="unknown-kv-dtype"),
        pytest.param(InferenceServiceSpec, {"model": MODEL, "replicas": {"min": 5, "max": 2}},
                     "spec.replicas.min", "must be <= spec.replicas.max", id="service-min-gt-max"),
        pytest.param(InferenceServiceSpec, {"model": MODEL, "hardware": {"gpusPerReplica": 0}},
                     "spec.hardware.gpusPerReplica", "greater than or equal to 1",
                     id="zero-gpus-per-replica"),
        pytest.param(InferenceServiceSpec, {"model": MODEL, "modle": {}},
                     "spec.modle", "Extra inputs", id="typo-field-rejected"),
        pytest.param(SLOPolicySpec, {"scaling": {"minReplicas": 4, "maxReplicas": 2}},
                     "spec.scaling.minReplicas", "must be <= spec.scaling.maxReplicas",
                     id="policy-min-gt-max"),
        pytest.param(SLOPolicySpec, {"scaling": {"minReplicas": 0}},
                     "spec.scaling.minReplicas", "scaleToZero", id="zero-min-needs-scale-to-zero"),
        pytest.param(SLOPolicySpec, {"objectives": {"e2eLatencyMs": -5}},
                     "spec.objectives.e2eLatencyMs", "greater than 0", id="negative-p99-target"),
        pytest.param(SLOPolicySpec, {"objectives": {"ttftMs": 0}},
                     "spec.objectives.ttftMs", "greater than 0", id="zero-ttft-target"),
        pytest.param(SLOPolicySpec, {"objectives": {"e2ePercentile": 1.0}},
                     "spec.objectives.e2ePercentile", "less than 1", id="percentile-one"),
        pytest.param(SLOPolicySpec, {"objectives": {"ttftPercentile": 0}},
                     "spec.objectives.ttftPercentile", "greater than 0", id="percentile-zero"),
        pytest.param(SLOPolicySpec, {"batching": {"minBatch": 64, "maxBatch": 8}},
                     "spec.batching.minBatch", "must be <= spec.batching.maxBatch",
                     id="batch-min-gt-max"),
        pytest.param(SLOPolicySpec, {"batching": {"mode": "sometimes"}},
                     "spec.batching.mode", "'live', 'restart' or 'off'", id="unknown-batch-mode"),
        pytest.param(SLOPolicySpec, {"window": "1 minute"},
                     "spec.window", "pattern", id="bad-duration"),
        pytest.param(SLOPolicySpec, {"objectives": {"e2eLatencyMs": 500,
                                                    "interTokenLatencyMs": 600}},
                     "spec.objectives.interTokenLatencyMs", "below", id="itl-above-e2e"),
    ],
)
def test_invalid_specs_name_the_field(cls: Any, data: dict[str, Any], want_field: str,
                                      want_text: str) -> None:
    errors = _errors(cls, data)
    assert any(e.startswith(want_field + ":") and want_text in e for e in errors), errors


def test_policy_defaults_match_design() -> None:
    spec = dump(SLOPolicySpec())
    assert spec["objectives"]["e2eLatencyMs"] == 800
    assert spec["objectives"]["ttftMs"] == 300
    assert spec["objectives"]["throughputCVMax"] == 0.15
    assert spec["window"] == "60s"
    assert spec["batching"]["mode"] == "live"
    assert spec["scaling"]["minReplicas"] <= spec["scaling"]["maxReplicas"]


def test_camel_case_round_trip() -> None:
    spec = InferenceServiceSpec.model_validate(
        {"model": {**MODEL, "numKVHeads": 8}, "engine": {"extraArgs": ["--seed", "1"]}}
    )
    assert spec.model.num_kv_heads == 8
    out = dump(spec)
    assert out["model"]["numKVHeads"] == 8
    assert out["engine"]["extraArgs"] == ["--seed", "1"]


@pytest.mark.parametrize(("text", "want"), [("60s", 60), ("5m", 300), ("1h", 3600)])
def test_parse_duration(text: str, want: int) -> None:
    assert parse_duration(text) == want


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")
