"""Which condition transitions post Events, and of which type (pure)."""

from __future__ import annotations

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.models import Condition
from slo_operator.reconcile.status import EventSpec, choose_events, policy_condition


def cond(ctype: str, status: str, reason: str) -> Condition:
    return Condition(type=ctype, status=status, reason=reason, message="m")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changed", "want"),
    [
        pytest.param(cond(C.READY, "False", C.NOT_READY), "Warning", id="not-ready-warns"),
        pytest.param(cond(C.READY, "True", C.AVAILABLE), "Normal", id="ready-is-normal"),
        pytest.param(cond(C.PROGRESSING, "True", C.ROLLING_OUT), None,
                     id="progressing-posts-nothing"),
        pytest.param(cond(C.SPEC_VALID, "True", C.VALID), None, id="valid-spec-posts-nothing"),
        pytest.param(cond(C.POLICY_BOUND, "False", C.POLICY_NOT_FOUND), "Warning",
                     id="unbound-policy-warns"),
        pytest.param(cond(C.HARDWARE_RESOLVED, "True", C.UNKNOWN_GPU), "Warning",
                     id="unknown-gpu-warns-even-when-true"),
        pytest.param(cond(C.METRICS_AVAILABLE, "False", C.METRICS_UNAVAILABLE), "Warning",
                     id="metrics-outage-warns"),
        pytest.param(cond(C.SCALING_LIMITED, "True", "AtMaxReplicas"), "Warning",
                     id="scaling-limited-warns"),
        pytest.param(cond(C.SCALING_LIMITED, "False", C.WITHIN_BOUNDS), "Normal",
                     id="scaling-unlimited-is-normal"),
        pytest.param(cond(C.SLO_COMPLIANT, "Unknown", C.AWAITING_METRICS), "Normal",
                     id="awaiting-metrics-is-normal"),
    ],
)
def test_choose_events(changed: Condition, want: str | None) -> None:
    got = choose_events([changed])
    assert got == ([EventSpec(want, changed.reason, "m")] if want else [])


def test_policy_condition_names_the_field_of_a_bad_policy() -> None:
    policy, c = policy_condition("ns", "gold", {"spec": {"scaling": {"minReplicas": -1}}})
    assert policy is None and c.reason == C.POLICY_INVALID
    assert "scaling.minReplicas" in c.message
