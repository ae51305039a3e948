"""policy_for: every SLOPolicy field reaches its ControlPolicy field as a plain value of the
declared type; replica_bounds at each combination of service bounds."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from slo_operator.api.models import ReplicaBounds, SLOPolicySpec
from slo_operator.control.capacity import DEFAULT_STEP_TIMES, StepTimes
from slo_operator.control.policy import ControlPolicy, policy_for, replica_bounds

FULL = SLOPolicySpec.model_validate({
    "objectives": {"e2eLatencyMs": 1234, "ttftMs": 321, "interTokenLatencyMs": 45,
                   "throughputCVMax": 0.25},
    "window": "2m",
    "scaling": {"minReplicas": 2, "maxReplicas": 9, "scaleUpStabilization": "15s",
                "scaleDownStabilization": "10m", "maxScaleUpStep": 3, "maxScaleDownStep": 2,
                "scaleToZero": True},
    "batching": {"mode": "restart", "minBatch": 4, "maxBatch": 96},
    "priority": 7,
    "gpuBudget": 12,
})


def test_every_field_of_the_policy_reaches_the_control_policy() -> None:
    st = StepTimes(10.0, 0.5, 0.05)
    p = policy_for(FULL, step_times=st)
    assert p == ControlPolicy(
        e2e_target_ms=1234.0, ttft_target_ms=321.0, itl_target_ms=45.0, jitter_max=0.25,
        window_s=120.0, min_replicas=2, max_replicas=9, scale_up_stabilization_s=15.0,
        scale_down_stabilization_s=600.0, max_scale_up_step=3, max_scale_down_step=2,
        scale_to_zero=True, batching_mode="restart", min_batch=4, max_batch=96, priority=7,
        gpu_budget=12, step_times=st)
    assert p.step_times is st


def test_the_crd_defaults_reach_the_control_policy() -> None:
    p = policy_for(SLOPolicySpec())
    assert (p.e2e_target_ms, p.ttft_target_ms, p.itl_target_ms, p.jitter_max) == \
        (800.0, 300.0, None, 0.15)
    assert (p.min_replicas, p.max_replicas, p.scale_to_zero) == (1, 8, False)
    assert (p.scale_up_stabilization_s, p.scale_down_stabilization_s) == (0.0, 300.0)
    assert (p.max_scale_up_step, p.max_scale_down_step) == (4, 1)
    assert (p.batching_mode, p.min_batch, p.max_batch) == ("live", 8, 256)
    assert (p.window_s, p.priority, p.gpu_budget, p.step_times) == (60.0, 0, None, None)


@pytest.mark.parametrize("spec", [FULL, SLOPolicySpec()], ids=["full", "defaults"])
def test_values_have_the_declared_types(spec: SLOPolicySpec) -> None:
    """Plain values (floats for times and targets), as the annotations say."""
    p = policy_for(spec, step_times=DEFAULT_STEP_TIMES)
    hints = typing.get_type_hints(ControlPolicy)
    assert set(hints) == {f.name for f in dataclasses.fields(ControlPolicy)}
    for name, hint in hints.items():
        value = getattr(p, name)
        allowed = typing.get_args(hint) or (hint,)
        allowed = tuple(type(None) if a is None else a for a in allowed)
        assert type(value) in allowed, (name, value, hint)


def test_the_control_policy_is_immutable() -> None:
    p = policy_for(SLOPolicySpec())
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.max_replicas = 3  # type: ignore[misc]


def _spec(lo: int, hi: int) -> SLOPolicySpec:
    return SLOPolicySpec.model_validate({"scaling": {"minReplicas": lo, "maxReplicas": hi}})


@pytest.mark.parametrize(
    ("pol", "bounds", "want"),
    [
        ((2, 8), None, (2, 8)),
        ((2, 8), ReplicaBounds(), (2, 8)),
        ((2, 8), ReplicaBounds(min=3), (3, 8)),
        ((2, 8), ReplicaBounds(min=2), (2, 8)),
        ((2, 8), ReplicaBounds(max=5), (2, 5)),
        ((2, 8), ReplicaBounds(max=8), (2, 8)),
        ((2, 8), ReplicaBounds(min=8, max=8), (8, 8)),
        ((2, 8), ReplicaBounds(min=0, max=1), (1, 1)),  # the tighter maximum wins
        ((2, 8), ReplicaBounds(min=9), (8, 8)),
        ((0, 8), ReplicaBounds(min=0), (0, 8)),
    ],
)
def test_replica_bounds(pol: tuple[int, int], bounds: ReplicaBounds | None,
                        want: tuple[int, int]) -> None:
    spec = _spec(*pol) if pol[0] else SLOPolicySpec.model_validate(
        {"scaling": {"minReplicas": 0, "maxReplicas": pol[1], "scaleToZero": True}})
    assert replica_bounds(spec, bounds) == want
    assert replica_bounds(spec) == replica_bounds(spec, None) == pol
