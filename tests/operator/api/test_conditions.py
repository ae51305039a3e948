"""Conditions (api.conditions): lastTransitionTime moves only on flips, the order users see,
Events only on transitions, and the wire values users match on."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.cluster import DeploymentObs, PodObs
from slo_operator.api.conditions import Cond, merge_conditions, rfc3339, transitions
from slo_operator.reconcile.status import rollout_conditions
from tests.support.paths import REPO

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ORDER = [C.READY, C.PROGRESSING, C.SPEC_VALID, C.POLICY_BOUND, C.HARDWARE_RESOLVED,
         C.SLO_COMPLIANT, C.METRICS_AVAILABLE, C.SCALING_LIMITED]


# ---------------------------------------------------------------- merge


def test_transition_time_moves_only_when_status_flips() -> None:
    first = merge_conditions([], [Cond(C.READY, False, C.NOT_READY, "0/1")], T0, 1)
    same = merge_conditions(first, [Cond(C.READY, False, C.PODS_PENDING, "pending")],
                            T0 + timedelta(minutes=5), 1)
    flipped = merge_conditions(same, [Cond(C.READY, True, C.AVAILABLE, "1/1")],
                               T0 + timedelta(minutes=9), 2)
    assert first[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert same[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert same[0].reason == C.PODS_PENDING
    assert flipped[0].last_transition_time == "2026-01-01T00:09:00Z"
    assert flipped[0].observed_generation == 2


def test_untouched_conditions_are_kept() -> None:
    old = merge_conditions([], [Cond(C.HARDWARE_RESOLVED, True, C.HARDWARE_FOUND)], T0, 1)
    new = merge_conditions(old, [Cond(C.READY, True, C.AVAILABLE)], T0, 1)
    assert [c.type for c in new] == [C.READY, C.HARDWARE_RESOLVED]


def test_known_types_come_in_their_documented_order_and_unknown_ones_last_by_name() -> None:
    new = [Cond(t, True, "R") for t in ["Beta", "Alpha", *reversed(ORDER)]]
    assert [c.type for c in merge_conditions([], new, T0, 1)] == [*ORDER, "Alpha", "Beta"]


def test_unknown_status_is_written_as_unknown() -> None:
    assert Cond(C.SLO_COMPLIANT, None, C.AWAITING_METRICS).status_str == "Unknown"
    assert Cond(C.READY, True, C.AVAILABLE).status_str == "True"
    assert Cond(C.READY, False, C.NOT_READY).status_str == "False"
    merged = merge_conditions([], [Cond(C.SLO_COMPLIANT, None, C.AWAITING_METRICS, "m")], T0, 4)
    assert (merged[0].status, merged[0].reason, merged[0].message) == (
        "Unknown", C.AWAITING_METRICS, "m")
    assert merged[0].observed_generation == 4


def test_a_merged_condition_carries_every_field_on_the_wire() -> None:
    (c,) = merge_conditions([], [Cond(C.READY, False, C.NOT_READY, "0/1")], T0, None)
    assert c.model_dump(by_alias=True) == {
        "type": "Ready", "status": "False", "reason": "ReplicasNotReady", "message": "0/1",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": None}


def test_timestamps_are_rfc3339_utc_to_the_second() -> None:
    assert rfc3339(datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)) == "2026-03-04T05:06:07Z"


def test_a_decided_condition_is_an_immutable_value() -> None:
    c = Cond(C.READY, True, C.AVAILABLE)
    with pytest.raises(FrozenInstanceError):
        c.reason = C.NOT_READY  # type: ignore[misc]


# ---------------------------------------------------------------- transitions and Events


def test_transitions_report_status_or_reason_changes_only() -> None:
    a = merge_conditions([], [Cond(C.READY, False, C.NOT_READY, "0/2")], T0, 1)
    b = merge_conditions(a, [Cond(C.READY, False, C.NOT_READY, "1/2")], T0, 1)
    c = merge_conditions(b, [Cond(C.READY, False, C.INSUFFICIENT_GPUS, "x")], T0, 1)
    assert transitions(a, b) == []
    assert [x.reason for x in transitions(b, c)] == [C.INSUFFICIENT_GPUS]


def test_a_new_type_is_a_transition_and_an_unchanged_one_is_not() -> None:
    old = merge_conditions([], [Cond(C.READY, True, C.AVAILABLE)], T0, 1)
    new = merge_conditions(old, [Cond(C.READY, True, C.AVAILABLE),
                                 Cond(C.SPEC_VALID, True, C.VALID)], T0, 2)
    assert [c.type for c in transitions(old, new)] == [C.SPEC_VALID]


def test_a_status_flip_with_the_same_reason_is_a_transition() -> None:
    old = merge_conditions([], [Cond(C.SLO_COMPLIANT, None, "Same")], T0, 1)
    new = merge_conditions(old, [Cond(C.SLO_COMPLIANT, False, "Same")], T0, 1)
    assert [c.status for c in transitions(old, new)] == ["False"]


def test_which_transitions_post_warning_and_normal_events() -> None:
    assert {C.READY, C.SPEC_VALID, C.POLICY_BOUND, C.HARDWARE_RESOLVED, C.SLO_COMPLIANT,
            C.METRICS_AVAILABLE, C.TENANT_BOUND} == C.WARN_WHEN_FALSE
    assert {C.SCALING_LIMITED, C.ENGINE_MISMATCH} == C.WARN_WHEN_TRUE
    assert {C.UNKNOWN_GPU, C.CRD_MISSING, C.WAKE_TIMED_OUT, C.NO_ACTIVATOR} == C.WARNING_REASONS
    assert {C.READY, C.HARDWARE_RESOLVED, C.SLO_COMPLIANT, C.METRICS_AVAILABLE,
            C.SCALING_LIMITED, C.INFERENCE_POOL_READY, C.AWAKE} == C.NORMAL_EVENT_TYPES


def test_every_condition_type_and_reason_is_documented_by_its_wire_value() -> None:
    """Users match on these strings (kubectl, alerts, Argo CD): each constant's value is
    in the status reference, so renaming one without the docs fails here."""

    doc = (REPO / "docs" / "status-and-events.md").read_text()
    values = {k: v for k, v in vars(C).items()
              if k.isupper() and not k.startswith("_") and not isinstance(v, frozenset)}
    assert len(values) > 30
    assert {k for k, v in values.items() if not isinstance(v, str) or not v} == set()
    missing = {k: v for k, v in values.items() if f"`{v}`" not in doc}
    assert missing == {}
    # The wire values users already rely on stay what they are.
    assert (C.READY, C.SLO_COMPLIANT, C.METRICS_AVAILABLE, C.SCALING_LIMITED) == (
        "Ready", "SLOCompliant", "MetricsAvailable", "ScalingLimited")
    assert (C.APPLY_FAILED, C.SCALED, C.BATCH_LIMIT_CHANGED, C.AWAITING_METRICS) == (
        "ApplyFailed", "Scaled", "BatchLimitChanged", "AwaitingMetrics")


# ---------------------------------------------------------------- rollout (reconcile.status)
# rollout_conditions lives in reconcile.status; these tests stay here until
# tests/operator/reconcile/test_status.py takes them (nothing else covers them).

GPU = "nvidia.com/gpu"
UNSCHED = PodObs("p-2", "Pending", True, "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.")


@pytest.mark.parametrize(
    ("desired", "dep", "pods", "want_ready", "want_reason", "want_progressing"),
    [
        pytest.param(2, DeploymentObs(2, 2, 2, 3, 3), [], "True", C.AVAILABLE, "False",
                     id="all-ready"),
        pytest.param(2, DeploymentObs(2, 1, 2, 3, 3), [], "False", C.NOT_READY, "True",
                     id="rolling-out"),
        pytest.param(2, None, [], "False", C.NOT_READY, "True", id="deployment-not-seen-yet"),
        pytest.param(2, DeploymentObs(2, 1, 2, 3, 3), [UNSCHED], "False", C.INSUFFICIENT_GPUS,
                     "False", id="gpus-ran-out"),
        pytest.param(2, DeploymentObs(2, 1, 2, 3, 3),
                     [PodObs("p", "Pending", True, "node(s) didn't match selector")], "False",
                     C.PODS_PENDING, "False", id="pending-other-reason"),
        pytest.param(0, DeploymentObs(0, 0, 0, 3, 3), [], "True", C.SCALED_TO_ZERO, "False",
                     id="scaled-to-zero"),
        pytest.param(1, None, [], "False", C.NOT_READY, "True",
                     id="one-wanted-none-seen-is-not-ready"),
        pytest.param(1, DeploymentObs(2, 1, 1, 3, 3), [UNSCHED], "True", C.INSUFFICIENT_GPUS,
                     "False", id="ready-while-a-surge-pod-waits-for-gpus"),
        pytest.param(2, DeploymentObs(2, 2, 2, 4, 3), [], "True", C.AVAILABLE, "True",
                     id="new-generation-not-observed-yet"),
        pytest.param(2, DeploymentObs(2, 2, 1, 3, 3), [], "True", C.AVAILABLE, "True",
                     id="old-replicas-still-serving"),
    ],
)
def test_rollout_conditions(desired: int, dep: DeploymentObs | None, pods: list[PodObs],
                            want_ready: str, want_reason: str, want_progressing: str) -> None:
    conds = {c.type: c for c in rollout_conditions(desired, dep, pods, GPU)}
    assert conds[C.READY].status_str == want_ready
    assert conds[C.READY].reason == want_reason
    assert conds[C.PROGRESSING].status_str == want_progressing


def test_rollout_messages_count_ready_replicas_and_quote_the_scheduler(golden: Any) -> None:
    ready, progressing = rollout_conditions(2, DeploymentObs(2, 1, 2, 3, 3), [UNSCHED], GPU)
    golden.check("api", "conditions.rollout.gpus-ran-out.ready", ready.message)
    golden.check("api", "conditions.rollout.gpus-ran-out.progressing", progressing.message)
    ready, progressing = rollout_conditions(2, DeploymentObs(2, 1, 2, 3, 3), [], GPU)
    golden.check("api", "conditions.rollout.rolling-out.ready", ready.message)
    golden.check("api", "conditions.rollout.rolling-out.progressing", progressing.message)
