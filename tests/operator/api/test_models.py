"""The API models (api.models): what a spec accepts, what it refuses and which field the
refusal names (the same rules CEL enforces), the defaults users get, and the wire form.

Refusal messages are pinned in tests/golden/api.yaml; the schema facts (every default,
bound and pattern) are held by test_crd's committed-CRD test.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slo_operator.api.errors import FieldProblem, field_problems, summarize
from slo_operator.api.models import (
    API_VERSION,
    Batching,
    Condition,
    EngineSpec,
    HardwareSpec,
    InferenceServiceSpec,
    InferenceServiceStatus,
    ModelSpec,
    Objectives,
    ReplicaBounds,
    Scaling,
    SLOPolicySpec,
    Toleration,
    dump,
    parse_duration,
)

MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct", "sizeBillions": 8}
PREFIX_253 = ".".join(["a" * 63] * 3 + ["b" * 61])  # a DNS prefix of 253 characters


def _problems(cls: Any, data: dict[str, Any]) -> list[FieldProblem]:
    with pytest.raises(ValidationError) as exc:
        cls.model_validate(data)
    return field_problems(exc.value)


def test_api_version_is_the_one_users_write() -> None:
    assert API_VERSION == "inference.slo-operator.io/v1alpha1"


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(("text", "want_seconds"), [
    pytest.param("0s", 0, id="zero"),
    pytest.param("1s", 1, id="one-second"),
    pytest.param("60s", 60, id="sixty-seconds"),
    pytest.param("90s", 90, id="seconds-past-a-minute"),
    pytest.param("1m", 60, id="one-minute"),
    pytest.param("5m", 300, id="five-minutes"),
    pytest.param("15m", 900, id="fifteen-minutes"),
    pytest.param("1h", 3600, id="one-hour"),
    pytest.param("2h", 7200, id="two-hours"),
    pytest.param("720h", 2592000, id="thirty-days-in-hours"),
])
def test_a_duration_is_its_number_times_its_unit_in_seconds(text: str,
                                                            want_seconds: int) -> None:
    assert parse_duration(text) == want_seconds


@pytest.mark.parametrize("text", [
    pytest.param("", id="empty"),
    pytest.param("s", id="unit-without-number"),
    pytest.param("1", id="number-without-unit"),
    pytest.param("1d", id="days-are-not-a-unit"),
    pytest.param("-1s", id="negative"),
    pytest.param("1.5m", id="fraction"),
    pytest.param("1 m", id="space-before-unit"),
    pytest.param("1S", id="upper-case-unit"),
    pytest.param("m1", id="unit-first"),
    pytest.param("soon", id="a-word"),
    pytest.param("60s\n", id="trailing-newline"),
])
def test_text_that_is_not_a_duration_is_refused(text: str, request: pytest.FixtureRequest,
                                                golden: Any) -> None:
    with pytest.raises(ValueError) as exc:
        parse_duration(text)
    golden.check("api", f"models.not-a-duration.{request.node.callspec.id}", str(exc.value))


# ---------------------------------------------------------------- what is refused


@pytest.mark.parametrize(("data", "want_field"), [
    # objectives
    pytest.param({"objectives": {"e2eLatencyMs": -5}}, "spec.objectives.e2eLatencyMs",
                 id="negative-e2e-target"),
    pytest.param({"objectives": {"ttftMs": 0}}, "spec.objectives.ttftMs", id="zero-ttft-target"),
    pytest.param({"objectives": {"e2ePercentile": 1.0}}, "spec.objectives.e2ePercentile",
                 id="percentile-one"),
    pytest.param({"objectives": {"ttftPercentile": 0}}, "spec.objectives.ttftPercentile",
                 id="percentile-zero"),
    pytest.param({"objectives": {"interTokenLatencyMs": 800, "e2eLatencyMs": 800}},
                 "spec.objectives.interTokenLatencyMs", id="inter-token-target-equal-to-e2e"),
    pytest.param({"objectives": {"interTokenLatencyMs": 801, "e2eLatencyMs": 800}},
                 "spec.objectives.interTokenLatencyMs", id="inter-token-target-above-e2e"),
    # scaling
    pytest.param({"scaling": {"minReplicas": 4, "maxReplicas": 3}}, "spec.scaling.minReplicas",
                 id="scaling-min-one-above-max"),
    pytest.param({"scaling": {"minReplicas": 0}}, "spec.scaling.minReplicas",
                 id="scaling-min-zero-without-scale-to-zero"),
    pytest.param({"scaling": {"minReplicas": 0, "scaleToZero": False}},
                 "spec.scaling.minReplicas", id="scaling-min-zero-with-scale-to-zero-false"),
    # batching
    pytest.param({"batching": {"minBatch": 17, "maxBatch": 16}}, "spec.batching.minBatch",
                 id="batch-min-one-above-max"),
    pytest.param({"batching": {"mode": "sometimes"}}, "spec.batching.mode",
                 id="unknown-batch-mode"),
    pytest.param({"batching": {"minbatch": 2}}, "spec.batching.minbatch",
                 id="misspelt-batching-field"),
    # the rest
    pytest.param({"window": "1 minute"}, "spec.window", id="window-not-a-duration"),
    pytest.param({"window": "0s"}, "spec.window", id="window-of-zero"),
    pytest.param({"window": "4s"}, "spec.window", id="window-below-two-fast-scrapes"),
    pytest.param({"window": "99999999h"}, "spec.window", id="window-beyond-a-go-duration"),
    pytest.param({"window": "2h"}, "spec.attainmentPeriod",
                 id="window-longer-than-the-default-attainment-period"),
    pytest.param({"window": "10m", "attainmentPeriod": "5m"}, "spec.attainmentPeriod",
                 id="attainment-period-shorter-than-the-window"),
])
def test_invalid_policies_name_the_field(data: dict[str, Any], want_field: str,
                                         request: pytest.FixtureRequest, golden: Any) -> None:
    problems = _problems(SLOPolicySpec, data)
    assert [p.field for p in problems] == [want_field]
    golden.check("api", f"models.policy-refused.{request.node.callspec.id}", summarize(problems))


@pytest.mark.parametrize(("data", "want_field"), [
    # model
    pytest.param({"model": {"name": "m"}}, "spec.model.sizeBillions", id="missing-model-size"),
    pytest.param({"model": {**MODEL, "sizeBillions": -1}}, "spec.model.sizeBillions",
                 id="negative-model-size"),
    pytest.param({"model": {**MODEL, "name": "-m"}}, "spec.model.name", id="name-is-an-option"),
    pytest.param({"model": {**MODEL, "name": " m"}}, "spec.model.name",
                 id="name-starts-with-a-space"),
    pytest.param({"model": {**MODEL, "name": "\tm"}}, "spec.model.name",
                 id="name-starts-with-a-tab"),
    pytest.param({"model": {**MODEL, "servedName": "--served"}}, "spec.model.servedName",
                 id="served-name-is-an-option"),
    pytest.param({"model": {**MODEL, "servedName": " x"}}, "spec.model.servedName",
                 id="served-name-starts-with-a-space"),
    pytest.param({"model": MODEL, "modle": {}}, "spec.modle", id="misspelt-top-level-field"),
    # engine
    pytest.param({"model": MODEL, "engine": {"precision": "fp4"}}, "spec.engine.precision",
                 id="unknown-precision"),
    pytest.param({"model": MODEL, "engine": {"kvCacheDtype": "int3"}},
                 "spec.engine.kvCacheDtype", id="unknown-kv-cache-dtype"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "A"}, {"name": "B"},
                                                     {"name": "A"}]}},
                 "spec.engine.env[2].name", id="env-name-set-twice"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "SLO_LIMIT"}]}},
                 "spec.engine.env[0].name", id="env-runtime-prefix"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "A"}, {"name": "SLO_"}]}},
                 "spec.engine.env[1].name", id="env-bare-runtime-prefix"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "PYTHONPATH"}]}},
                 "spec.engine.env[0].name", id="env-pythonpath"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "POD_NAME"}]}},
                 "spec.engine.env[0].name", id="env-pod-name"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "POD_NAMESPACE"}]}},
                 "spec.engine.env[0].name", id="env-pod-namespace"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "HOME"}]}},
                 "spec.engine.env[0].name", id="env-home"),
    pytest.param({"model": MODEL, "engine": {"env": [{"name": "QUANT_CONFIG"}]}},
                 "spec.engine.env[0].name", id="env-quant-config"),
    # hardware
    pytest.param({"model": MODEL, "hardware": {"gpusPerReplica": 0}},
                 "spec.hardware.gpusPerReplica", id="zero-gpus-per-replica"),
    pytest.param({"model": MODEL, "hardware": {"tolerations": [{}]}},
                 "spec.hardware.tolerations[0].key", id="toleration-without-key"),
    pytest.param({"model": MODEL, "hardware": {"tolerations": [{"key": ""}]}},
                 "spec.hardware.tolerations[0].key", id="toleration-empty-key"),
    pytest.param({"model": MODEL, "hardware": {"tolerations": [{"key": "",
                                                                "operator": "Equal"}]}},
                 "spec.hardware.tolerations[0].key", id="toleration-empty-key-with-equal"),
    pytest.param({"model": MODEL, "hardware": {"tolerations": [{"operator": "Exists",
                                                                "value": "v"}]}},
                 "spec.hardware.tolerations[0].value", id="toleration-exists-with-value"),
    pytest.param({"model": MODEL, "hardware": {"tolerations": [{"key": "gpu",
                                                                "tolerationSeconds": 5}]}},
                 "spec.hardware.tolerations[0].tolerationSeconds",
                 id="toleration-seconds-without-effect"),
    pytest.param({"model": MODEL, "hardware": {"tolerations": [
        {"key": "gpu", "tolerationSeconds": 0, "effect": "NoSchedule"}]}},
                 "spec.hardware.tolerations[0].tolerationSeconds",
                 id="toleration-seconds-with-no-schedule"),
    # replicas
    pytest.param({"model": MODEL, "replicas": {"min": 4, "max": 3}}, "spec.replicas.min",
                 id="service-min-one-above-max"),
])
def test_invalid_services_name_the_field(data: dict[str, Any], want_field: str,
                                         request: pytest.FixtureRequest, golden: Any) -> None:
    problems = _problems(InferenceServiceSpec, data)
    assert [p.field for p in problems] == [want_field]
    golden.check("api", f"models.service-refused.{request.node.callspec.id}",
                 summarize(problems))


@pytest.mark.parametrize("key", [
    pytest.param("-zone", id="leading-dash"),
    pytest.param("", id="empty"),
    pytest.param("/zone", id="empty-prefix"),
    pytest.param("example.com/", id="empty-name"),
    pytest.param(f"{PREFIX_253}b/name", id="prefix-of-254"),
    pytest.param("a/b/c", id="two-slashes"),
    pytest.param("x" * 64, id="name-of-64"),
    pytest.param("Example.com/zone", id="upper-case-prefix"),
    pytest.param("zone\n", id="trailing-newline"),
])
def test_node_selector_keys_that_are_not_label_keys_are_refused(
    key: str, request: pytest.FixtureRequest, golden: Any
) -> None:
    problems = _problems(InferenceServiceSpec, {
        "model": MODEL, "hardware": {"nodeSelector": {"ok": "v", key: "v"}}})
    assert [p.field for p in problems] == ["spec.hardware.nodeSelector"]
    golden.check("api", f"models.node-selector-refused.{request.node.callspec.id}",
                 summarize(problems))


# ---------------------------------------------------------------- what is accepted


@pytest.mark.parametrize(("want_itl", "e2e"), [
    pytest.param(799, 800, id="one-below"), pytest.param(1, 2, id="smallest")])
def test_inter_token_target_below_e2e_is_accepted(want_itl: int, e2e: int) -> None:
    o = Objectives.model_validate({"interTokenLatencyMs": want_itl, "e2eLatencyMs": e2e})
    assert o.inter_token_latency_ms == want_itl


@pytest.mark.parametrize(("data", "want_bounds"), [
    pytest.param({"minReplicas": 3, "maxReplicas": 3}, (3, 3), id="min-equals-max"),
    pytest.param({"minReplicas": 1, "maxReplicas": 1}, (1, 1), id="one-replica"),
    pytest.param({"minReplicas": 0, "maxReplicas": 2, "scaleToZero": True}, (0, 2),
                 id="zero-with-scale-to-zero"),
    pytest.param({"minReplicas": 2, "maxReplicas": 5, "scaleToZero": True}, (2, 5),
                 id="scale-to-zero-with-a-floor"),
])
def test_scaling_bounds_accepted(data: dict[str, Any], want_bounds: tuple[int, int]) -> None:
    s = Scaling.model_validate(data)
    assert (s.min_replicas, s.max_replicas) == want_bounds


def test_batch_min_equal_to_max_is_accepted() -> None:
    assert Batching.model_validate({"minBatch": 16, "maxBatch": 16}).min_batch == 16


@pytest.mark.parametrize("data", [
    pytest.param({}, id="unset"), pytest.param({"min": 3}, id="min-only"),
    pytest.param({"max": 3}, id="max-only"), pytest.param({"min": 3, "max": 3}, id="equal"),
    pytest.param({"min": 0, "max": 1}, id="zero-to-one"),
])
def test_service_replica_bounds_accepted(data: dict[str, Any]) -> None:
    b = ReplicaBounds.model_validate(data)
    assert (b.min, b.max) == (data.get("min"), data.get("max"))


@pytest.mark.parametrize("name", [
    pytest.param("m", id="one-letter"), pytest.param("org/model", id="hugging-face-id"),
    pytest.param("/models/x", id="path"), pytest.param("a-b", id="inner-dash"),
    pytest.param("x -y", id="inner-option-like-word"),
])
def test_model_names_passed_to_vllm_accepted(name: str) -> None:
    m = ModelSpec.model_validate({"name": name, "servedName": name, "sizeBillions": 1})
    assert (m.name, m.served_name) == (name, name)


@pytest.mark.parametrize("env", [
    pytest.param([], id="none"), pytest.param([{"name": "A"}], id="one"),
    pytest.param([{"name": "A"}, {"name": "B"}], id="two-names"),
    pytest.param([{"name": "XSLO_A"}], id="runtime-prefix-not-at-start"),
    pytest.param([{"name": "HOMEDIR"}], id="operator-name-as-a-prefix"),
    pytest.param([{"name": "slo_x"}], id="runtime-prefix-lower-case"),
])
def test_user_env_accepted(env: list[dict[str, str]]) -> None:
    assert [e.name for e in EngineSpec.model_validate({"env": env}).env] == [
        e["name"] for e in env]


@pytest.mark.parametrize("data", [
    pytest.param({"key": "gpu"}, id="key-only"),
    pytest.param({"key": "gpu", "operator": "Equal", "value": "yes"}, id="equal-with-value"),
    pytest.param({"operator": "Exists"}, id="exists-matches-all"),
    pytest.param({"key": "", "operator": "Exists"}, id="empty-key-with-exists"),
    pytest.param({"key": "gpu", "operator": "Exists"}, id="exists-with-key"),
    pytest.param({"key": "gpu", "operator": "Exists", "value": ""}, id="exists-empty-value"),
    pytest.param({"key": "gpu", "effect": "NoExecute", "tolerationSeconds": 30},
                 id="seconds-with-no-execute"),
    pytest.param({"key": "gpu", "effect": "NoExecute", "tolerationSeconds": 0},
                 id="zero-seconds-with-no-execute"),
])
def test_tolerations_accepted(data: dict[str, Any]) -> None:
    t = Toleration.model_validate(data)
    assert t.key == data.get("key")


@pytest.mark.parametrize("key", [
    pytest.param("zone", id="name-only"), pytest.param("example.com/zone", id="prefixed"),
    pytest.param("a/b", id="shortest-prefix"),
    pytest.param(f"{PREFIX_253}/name", id="prefix-of-253"),
    pytest.param("Zone_1.x", id="mixed-case-name"), pytest.param("x" * 63, id="name-of-63"),
])
def test_node_selector_keys_accepted(key: str) -> None:
    assert len(PREFIX_253) == 253
    assert list(HardwareSpec.model_validate({"nodeSelector": {key: "v"}}).node_selector) == [key]


# ---------------------------------------------------------------- defaults and the wire


def test_policy_defaults_match_design() -> None:
    spec = dump(SLOPolicySpec())
    assert spec["objectives"]["e2eLatencyMs"] == 800
    assert spec["objectives"]["ttftMs"] == 300
    assert "throughputCVMax" not in spec["objectives"]  # jitter judges only where set
    assert spec["window"] == "60s"
    assert spec["batching"]["mode"] == "live"
    assert spec["scaling"] == {
        "minReplicas": 1, "maxReplicas": 8, "scaleUpStabilization": "0s",
        "scaleDownStabilization": "300s", "maxScaleUpStep": 4, "maxScaleDownStep": 1,
        "scaleToZero": False}


def test_camel_case_round_trip() -> None:
    spec = InferenceServiceSpec.model_validate(
        {"model": {**MODEL, "numKVHeads": 8}, "engine": {"extraArgs": ["--seed", "1"]}}
    )
    assert spec.model.num_kv_heads == 8
    out = dump(spec)
    assert out["model"]["numKVHeads"] == 8
    assert out["engine"]["extraArgs"] == ["--seed", "1"]


def test_dump_is_camel_case_json_without_nulls() -> None:
    out = dump(InferenceServiceSpec.model_validate({"model": {"name": "m", "sizeBillions": 7.5}}))
    assert out["model"] == {"name": "m", "sizeBillions": 7.5}
    assert "sloPolicyRef" not in out
    assert out["engine"]["image"] == "vllm/vllm-openai:v0.32.0"
    assert out["replicas"] == {}


def test_spec_models_accept_python_names_and_are_frozen() -> None:
    s = Scaling(min_replicas=2, max_replicas=3)
    assert (s.min_replicas, s.max_replicas) == (2, 3)
    with pytest.raises(ValidationError, match="frozen"):
        s.min_replicas = 1  # type: ignore[misc]


def test_status_models_ignore_fields_from_newer_versions_and_change_in_place() -> None:
    c = Condition.model_validate({"type": "Ready", "status": "True", "reason": "R",
                                  "fromANewerVersion": 1})
    assert dump(c) == {"type": "Ready", "status": "True", "reason": "R", "message": ""}
    st = InferenceServiceStatus.model_validate({"readyReplicas": 2, "futureField": "x"})
    assert st.ready_replicas == 2
    st.ready_replicas = 3  # the operator builds status in place
    assert dump(st)["readyReplicas"] == 3


def test_status_accepts_python_names() -> None:
    st = InferenceServiceStatus(ready_replicas=1, slo_compliant=True)
    assert dump(st) == {"readyReplicas": 1, "sloCompliant": True, "variants": [],
                        "engineArgs": [], "engineNotes": [], "lastDecisions": [],
                        "conditions": []}
