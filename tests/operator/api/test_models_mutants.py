"""The API models' own checks at their boundaries (api.models): what is accepted, what is
refused and which field the refusal names; the schema facts are held by test_crds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from slo_operator.api.errors import field_problems
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


def _refused(cls: type[BaseModel], data: dict[str, Any], prefix: str = "spec") -> list[str]:
    with pytest.raises(ValidationError) as exc:
        cls.model_validate(data)
    return [str(p) for p in field_problems(exc.value, prefix)]


def test_api_version() -> None:
    assert API_VERSION == "inference.slo-operator.io/v1alpha1"


@pytest.mark.parametrize(("text", "seconds"), [
    ("0s", 0), ("1s", 1), ("90s", 90), ("1m", 60), ("15m", 900), ("2h", 7200), ("720h", 2592000)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "1", "1d", "-1s", "1.5m", "1 m", "1S", "m1"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match=f"^{text!r} is not a duration like 60s, 5m or 1h$"):
        parse_duration(text)


# ---------------------------------------------------------------- cross-field rules


@pytest.mark.parametrize(("itl", "e2e"), [(799, 800), (1, 2)])
def test_inter_token_target_below_e2e_is_accepted(itl: int, e2e: int) -> None:
    o = Objectives.model_validate({"interTokenLatencyMs": itl, "e2eLatencyMs": e2e})
    assert o.inter_token_latency_ms == itl


@pytest.mark.parametrize(("itl", "e2e"), [(800, 800), (801, 800)])
def test_inter_token_target_at_or_above_e2e_is_refused(itl: int, e2e: int) -> None:
    assert _refused(SLOPolicySpec, {"objectives": {"interTokenLatencyMs": itl,
                                                   "e2eLatencyMs": e2e}}) == [
        "spec.objectives.interTokenLatencyMs: spec.objectives.interTokenLatencyMs must be "
        "below spec.objectives.e2eLatencyMs"]


def test_no_inter_token_target_by_default() -> None:
    assert Objectives().inter_token_latency_ms is None


@pytest.mark.parametrize(("data", "want"), [
    ({"minReplicas": 3, "maxReplicas": 3}, (3, 3)),
    ({"minReplicas": 1, "maxReplicas": 1}, (1, 1)),
    ({"minReplicas": 0, "maxReplicas": 2, "scaleToZero": True}, (0, 2)),
    ({"minReplicas": 2, "maxReplicas": 5, "scaleToZero": True}, (2, 5)),
])
def test_scaling_bounds_accepted(data: dict[str, Any], want: tuple[int, int]) -> None:
    s = Scaling.model_validate(data)
    assert (s.min_replicas, s.max_replicas) == want


@pytest.mark.parametrize(("data", "want"), [
    ({"minReplicas": 4, "maxReplicas": 3},
     "spec.scaling.minReplicas: spec.scaling.minReplicas (4) must be <= "
     "spec.scaling.maxReplicas (3)"),
    ({"minReplicas": 0},
     "spec.scaling.minReplicas: spec.scaling.minReplicas may be 0 only with "
     "spec.scaling.scaleToZero: true"),
    ({"minReplicas": 0, "scaleToZero": False},
     "spec.scaling.minReplicas: spec.scaling.minReplicas may be 0 only with "
     "spec.scaling.scaleToZero: true"),
])
def test_scaling_bounds_refused(data: dict[str, Any], want: str) -> None:
    assert _refused(SLOPolicySpec, {"scaling": data}) == [want]


def test_batching_bounds() -> None:
    assert Batching.model_validate({"minBatch": 16, "maxBatch": 16}).min_batch == 16
    assert _refused(SLOPolicySpec, {"batching": {"minBatch": 17, "maxBatch": 16}}) == [
        "spec.batching.minBatch: spec.batching.minBatch (17) must be <= "
        "spec.batching.maxBatch (16)"]


@pytest.mark.parametrize("data", [{}, {"min": 3}, {"max": 3}, {"min": 3, "max": 3},
                                  {"min": 0, "max": 1}])
def test_service_replica_bounds_accepted(data: dict[str, Any]) -> None:
    b = ReplicaBounds.model_validate(data)
    assert (b.min, b.max) == (data.get("min"), data.get("max"))


def test_service_replica_bounds_refused() -> None:
    assert _refused(ReplicaBounds, {"min": 4, "max": 3}) == [
        "spec.replicas.min: spec.replicas.min (4) must be <= spec.replicas.max (3)"]


# ---------------------------------------------------------------- names and env


@pytest.mark.parametrize("name", ["m", "org/model", "/models/x", "a-b", "x -y"])
def test_model_names_passed_to_vllm_accepted(name: str) -> None:
    m = ModelSpec.model_validate({"name": name, "servedName": name, "sizeBillions": 1})
    assert (m.name, m.served_name) == (name, name)


@pytest.mark.parametrize(("field", "value"), [
    ("name", "-m"), ("name", " m"), ("name", "\tm"), ("servedName", "--served"),
    ("servedName", " x")])
def test_model_names_that_look_like_options_refused(field: str, value: str) -> None:
    data = {"name": "m", "sizeBillions": 1, field: value}
    assert _refused(ModelSpec, data, "spec.model") == [
        f"spec.model.{field}: must not start with '-' or a space (it is passed to vllm serve "
        "as an argument value)"]


def test_served_name_defaults_to_unset() -> None:
    assert ModelSpec.model_validate({"name": "m", "sizeBillions": 1}).served_name is None


@pytest.mark.parametrize("env", [
    [], [{"name": "A"}], [{"name": "A"}, {"name": "B"}], [{"name": "XSLO_A"}],
    [{"name": "HOMEDIR"}], [{"name": "slo_x"}]])
def test_user_env_accepted(env: list[dict[str, str]]) -> None:
    assert [e.name for e in EngineSpec.model_validate({"env": env}).env] == [
        e["name"] for e in env]


@pytest.mark.parametrize(("env", "want"), [
    ([{"name": "A"}, {"name": "B"}, {"name": "A"}],
     "spec.engine.env[2].name: 'A' is set twice"),
    ([{"name": "SLO_LIMIT"}], "spec.engine.env[0].name: 'SLO_LIMIT' is set by the operator"),
    ([{"name": "A"}, {"name": "SLO_"}], "spec.engine.env[1].name: 'SLO_' is set by the operator"),
    ([{"name": "PYTHONPATH"}], "spec.engine.env[0].name: 'PYTHONPATH' is set by the operator"),
    ([{"name": "POD_NAME"}], "spec.engine.env[0].name: 'POD_NAME' is set by the operator"),
    ([{"name": "POD_NAMESPACE"}],
     "spec.engine.env[0].name: 'POD_NAMESPACE' is set by the operator"),
    ([{"name": "HOME"}], "spec.engine.env[0].name: 'HOME' is set by the operator"),
    ([{"name": "QUANT_CONFIG"}], "spec.engine.env[0].name: 'QUANT_CONFIG' is set by the operator"),
])
def test_user_env_refused(env: list[dict[str, str]], want: str) -> None:
    assert _refused(EngineSpec, {"env": env}, "spec.engine") == [want]


# ---------------------------------------------------------------- hardware


@pytest.mark.parametrize("data", [
    {"key": "gpu"}, {"key": "gpu", "operator": "Equal", "value": "yes"},
    {"operator": "Exists"}, {"key": "", "operator": "Exists"},
    {"key": "gpu", "operator": "Exists"}, {"key": "gpu", "operator": "Exists", "value": ""},
    {"key": "gpu", "effect": "NoExecute", "tolerationSeconds": 30},
    {"key": "gpu", "effect": "NoExecute", "tolerationSeconds": 0},
])
def test_tolerations_accepted(data: dict[str, Any]) -> None:
    t = Toleration.model_validate(data)
    assert t.key == data.get("key")


@pytest.mark.parametrize(("data", "want"), [
    ({}, "spec.hardware.tolerations[0].key: an empty key needs operator Exists"),
    ({"key": ""}, "spec.hardware.tolerations[0].key: an empty key needs operator Exists"),
    ({"key": "", "operator": "Equal"},
     "spec.hardware.tolerations[0].key: an empty key needs operator Exists"),
    ({"operator": "Exists", "value": "v"},
     "spec.hardware.tolerations[0].value: operator Exists takes no value"),
    ({"key": "gpu", "tolerationSeconds": 5},
     "spec.hardware.tolerations[0].tolerationSeconds: needs effect NoExecute"),
    ({"key": "gpu", "tolerationSeconds": 0, "effect": "NoSchedule"},
     "spec.hardware.tolerations[0].tolerationSeconds: needs effect NoExecute"),
])
def test_tolerations_refused(data: dict[str, Any], want: str) -> None:
    assert _refused(HardwareSpec, {"tolerations": [data]}, "spec.hardware") == [want]


PREFIX_253 = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 characters


@pytest.mark.parametrize("key", [
    "zone", "example.com/zone", "a/b", f"{PREFIX_253}/name", "Zone_1.x", "x" * 63])
def test_node_selector_keys_accepted(key: str) -> None:
    assert len(PREFIX_253) == 253
    assert list(HardwareSpec.model_validate({"nodeSelector": {key: "v"}}).node_selector) == [key]


@pytest.mark.parametrize("key", [
    "-zone", "", "/zone", "example.com/", f"{PREFIX_253}b/name", "a/b/c", "x" * 64,
    "Example.com/zone"])
def test_node_selector_keys_refused(key: str) -> None:
    assert _refused(HardwareSpec, {"nodeSelector": {"ok": "v", key: "v"}}, "spec.hardware") == [
        f"spec.hardware.nodeSelector: {key!r} is not a label key such as example.com/zone"]


# ---------------------------------------------------------------- wire behaviour


def test_spec_models_accept_python_names_and_are_frozen() -> None:
    s = Scaling(min_replicas=2, max_replicas=3)
    assert (s.min_replicas, s.max_replicas) == (2, 3)
    with pytest.raises(ValidationError, match="frozen"):
        s.min_replicas = 1  # type: ignore[misc]


def test_spec_models_refuse_unknown_fields_and_status_models_ignore_them() -> None:
    assert _refused(Batching, {"minbatch": 2}) == ["spec.minbatch: Extra inputs are not permitted"]
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


def test_dump_is_camel_case_json_without_nulls() -> None:
    spec = InferenceServiceSpec.model_validate({"model": {"name": "m", "sizeBillions": 7.5}})
    out = dump(spec)
    assert out["model"] == {"name": "m", "sizeBillions": 7.5}
    assert "sloPolicyRef" not in out
    assert out["engine"]["image"] == "vllm/vllm-openai:v0.32.0"
    assert out["replicas"] == {}
    assert dump(SLOPolicySpec())["scaling"] == {
        "minReplicas": 1, "maxReplicas": 8, "scaleUpStabilization": "0s",
        "scaleDownStabilization": "300s", "maxScaleUpStep": 4, "maxScaleDownStep": 1,
        "scaleToZero": False}
