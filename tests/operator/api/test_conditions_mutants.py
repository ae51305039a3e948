"""Condition order and Event typing (api.conditions), pinned whole."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_type_hints

from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond, merge_conditions, transitions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_known_type_has_its_place_in_the_status() -> None:
    order = [C.READY, C.PROGRESSING, C.SPEC_VALID, C.POLICY_BOUND, C.HARDWARE_RESOLVED,
             C.SLO_COMPLIANT, C.METRICS_AVAILABLE, C.SCALING_LIMITED]
    new = [Cond(t, True, "R") for t in ["Beta", "Alpha", *reversed(order)]]
    assert [c.type for c in merge_conditions([], new, T0, 1)] == [*order, "Alpha", "Beta"]


def test_normal_events_are_posted_for_these_types() -> None:
    assert {C.READY, C.HARDWARE_RESOLVED, C.SLO_COMPLIANT, C.METRICS_AVAILABLE,
            C.SCALING_LIMITED} == C.NORMAL_EVENT_TYPES


def test_a_new_type_is_a_transition_and_an_unchanged_one_is_not() -> None:
    old = merge_conditions([], [Cond(C.READY, True, C.AVAILABLE)], T0, 1)
    new = merge_conditions(old, [Cond(C.READY, True, C.AVAILABLE),
                                 Cond(C.SPEC_VALID, True, C.VALID)], T0, 2)
    assert [c.type for c in transitions(old, new)] == [C.SPEC_VALID]


def test_a_status_flip_with_the_same_reason_is_a_transition() -> None:
    old = merge_conditions([], [Cond(C.SLO_COMPLIANT, None, "Same")], T0, 1)
    new = merge_conditions(old, [Cond(C.SLO_COMPLIANT, False, "Same")], T0, 1)
    assert [c.status for c in transitions(old, new)] == ["False"]


def test_a_merged_condition_carries_every_field_on_the_wire() -> None:
    (c,) = merge_conditions([], [Cond(C.READY, False, C.NOT_READY, "0/1")], T0, None)
    assert c.model_dump(by_alias=True) == {
        "type": "Ready", "status": "False", "reason": "ReplicasNotReady", "message": "0/1",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": None}


def test_declared_types_resolve() -> None:
    """Unknown is a status of None: the types say so (typing.get_type_hints)."""
    assert get_type_hints(Cond)["status"] == bool | None
    assert get_type_hints(merge_conditions)["generation"] == int | None
