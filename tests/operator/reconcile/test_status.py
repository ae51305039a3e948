"""Which condition transitions post Events, and of which type; when a status is worth a
write (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond
from slo_operator.api.models import Condition, DecisionRecord
from slo_operator.api.observe import MetricsState, Signals
from slo_operator.control import reasons as R
from slo_operator.reconcile.status import (
    HEARTBEAT_S,
    EventSpec,
    action_events,
    append_decision,
    choose_events,
    hardware_condition,
    heartbeat_due,
    metrics_condition,
    observed_status,
    policy_condition,
    scaling_condition,
    slo_condition,
    status_write,
    written_at,
)
from slo_operator.slo.evaluate import Outcome, Verdict

T0 = datetime(2026, 1, 1, tzinfo=UTC)


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
        pytest.param(cond(C.SCALING_LIMITED, "True", R.TOO_MANY_REPLICAS), "Warning",
                     id="max-replicas-while-the-load-needs-more-warns"),
        pytest.param(cond(C.SCALING_LIMITED, "True", R.GPU_BUDGET), "Warning",
                     id="gpu-budget-warns"),
        pytest.param(cond(C.SCALING_LIMITED, "True", R.NO_GPUS), "Warning",
                     id="no-free-gpus-warns"),
        pytest.param(cond(C.SCALING_LIMITED, "True", R.TOO_FEW_REPLICAS), "Normal",
                     id="resting-at-min-replicas-is-normal-not-a-warning"),
        pytest.param(cond(C.SCALING_LIMITED, "True", R.SCALE_DOWN_LIMIT), "Normal",
                     id="a-scale-down-one-step-at-a-time-is-normal"),
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
    assert policy is None and c.reason == C.POLICY_INVALID and c.status is False
    assert "scaling.minReplicas" in c.message


@pytest.mark.parametrize(
    ("state", "held", "want_status", "want_reason"),
    [
        pytest.param(MetricsState.OK, False, True, C.METRICS_OK, id="ok"),
        pytest.param(MetricsState.NO_TRAFFIC, False, True, C.NO_TRAFFIC, id="idle-is-fine"),
        pytest.param(MetricsState.PARTIAL, True, False, C.METRICS_PARTIAL, id="partial"),
        pytest.param(MetricsState.EMPTY, True, False, C.METRICS_EMPTY, id="empty"),
        pytest.param(MetricsState.STALE, True, False, C.METRICS_STALE, id="stale"),
        pytest.param(MetricsState.UNAVAILABLE, True, False, C.METRICS_UNAVAILABLE,
                     id="prometheus-down"),
    ],
)
def test_metrics_condition(state: MetricsState, held: bool, want_status: bool,
                           want_reason: str) -> None:
    c = metrics_condition(Signals(state=state, message="why"), held)
    assert (c.type, c.status, c.reason) == (C.METRICS_AVAILABLE, want_status, want_reason)
    assert c.message.startswith("why")
    assert ("holding the last good" in c.message) is (held and not want_status)


@pytest.mark.parametrize(
    ("verdict", "want"),
    [
        pytest.param(Verdict(Outcome.GOOD, message="all met"), (True, C.SLO_MET), id="good"),
        pytest.param(Verdict(Outcome.BAD, ("e2e",), "e2e 900ms > 800ms"), (False, C.SLO_MISSED),
                     id="bad"),
        pytest.param(Verdict(Outcome.UNKNOWN, message="no traffic"),
                     (None, C.AWAITING_METRICS), id="unknown"),
    ],
)
def test_slo_condition(verdict: Verdict, want: tuple[bool | None, str]) -> None:
    c = slo_condition(verdict)
    assert (c.type, c.status, c.reason) == (C.SLO_COMPLIANT, *want)
    assert c.message == verdict.message


def test_scaling_condition() -> None:
    assert scaling_condition(None, "") == Cond(C.SCALING_LIMITED, False, C.WITHIN_BOUNDS,
                                               "The decision was not clipped")
    assert scaling_condition("GPUBudgetExceeded", "budget 8") == Cond(
        C.SCALING_LIMITED, True, "GPUBudgetExceeded", "budget 8")


def test_observed_status_rounds_and_keeps_missing_missing() -> None:
    sig = Signals(state=MetricsState.OK, e2e_ms=812.3456, ttft_ms=None, jitter=0.123456,
                  request_rate=12.04, waiting=0.0)
    obs = observed_status(sig, T0)
    assert obs.e2e_ms == 812.0 and obs.throughput_cv == 0.123 and obs.request_rate == 12.0
    assert obs.ttft_ms is None and obs.queue == 0.0
    assert obs.state == "OK" and obs.time == "2026-01-01T00:00:00Z"


def rec(replicas: int, limit: int, reason: str, t: int = 0) -> DecisionRecord:
    return DecisionRecord(time=f"t{t}", replicas=replicas, batch_limit=limit, reason=reason)


def test_decision_history_skips_repeats_and_keeps_ten() -> None:
    history = [rec(2, 64, "Steady")]
    assert append_decision(history, rec(2, 64, "Steady", 1)) == history
    assert len(append_decision(history, rec(3, 64, "LoadIncreased", 1))) == 2
    assert len(append_decision(history, rec(2, 32, "Steady", 1))) == 2
    many = [rec(i, 64, "LoadIncreased", i) for i in range(10)]
    got = append_decision(many, rec(99, 64, "LoadIncreased", 10))
    assert len(got) == 10 and got[0].replicas == 1 and got[-1].replicas == 99


@pytest.mark.parametrize(
    ("old", "new", "old_limit", "new_limit", "want"),
    [
        pytest.param(None, 2, None, 64, [], id="first-setting-is-no-action"),
        pytest.param(2, 3, 64, 64, [C.SCALED], id="scale"),
        pytest.param(2, 2, 64, 32, [C.BATCH_LIMIT_CHANGED], id="limit"),
        pytest.param(2, 1, 64, 96, [C.SCALED, C.BATCH_LIMIT_CHANGED], id="both"),
        pytest.param(2, 2, 64, 64, [], id="nothing"),
    ],
)
def test_action_events(old: int | None, new: int, old_limit: int | None, new_limit: int,
                       want: list[str]) -> None:
    got = action_events(old, new, old_limit, new_limit, "LoadIncreased: because")
    assert [e.reason for e in got] == want
    assert all(e.type == "Normal" and e.message.endswith("LoadIncreased: because") for e in got)
    if C.SCALED in want:
        assert f"from {old} to {new} replicas" in got[0].message


def test_hardware_condition_says_conservative_only_for_unknown_products() -> None:
    known = hardware_condition(True, "ignored", "H100-SXM-80GB", 2, 8, "dtype bfloat16")
    assert known.message == "H100-SXM-80GB pool (2 nodes, 8 GPUs each): dtype bfloat16"
    assert known.reason == C.HARDWARE_FOUND
    unknown = hardware_condition(False, "X900 is not in the catalogue", "X900", 1, 4, "d")
    assert unknown.message.startswith("X900 is not in the catalogue; conservative settings: ")
    assert unknown.reason == C.UNKNOWN_GPU and unknown.status is True


def test_usable_metrics_never_claim_a_hold() -> None:
    c = metrics_condition(Signals(state=MetricsState.OK, message="fine"), held=True)
    assert c.message == "fine"


# ---------------------------------------------------------------- when status is written

T0S = T0.timestamp()


def written(**changes: Any) -> dict[str, Any]:
    """A status as the SLO loop writes it (wire form) at T0; ``changes`` replace keys."""
    base: dict[str, Any] = {
        "observedGeneration": 1, "desiredReplicas": 2, "replicas": 2, "readyReplicas": 2,
        "batchLimit": 64, "sloCompliant": True, "attainment": 0.995,
        "errorBudgetRemaining": 0.5,
        "observed": {"e2eMs": 412.0, "ttftMs": 80.0, "requestRate": 12.0, "queue": 0.0,
                     "running": 6.0, "kvCacheUsage": 0.3, "state": "OK",
                     "time": "2026-01-01T00:00:00Z"},
        "control": {"state": {"v": 1, "lastTime": T0S, "correction": 1.0}},
        "lastDecisions": [{"time": "2026-01-01T00:00:00Z", "replicas": 2, "batchLimit": 64,
                           "reason": "Steady", "message": "m"}],
        "conditions": [
            {"type": C.READY, "status": "True", "reason": C.AVAILABLE,
             "message": "2/2 replicas ready", "lastTransitionTime": "2025-12-31T00:00:00Z",
             "observedGeneration": 1},
            {"type": C.SLO_COMPLIANT, "status": "False", "reason": C.SLO_MISSED,
             "message": "e2e 412ms > 400ms", "lastTransitionTime": "2025-12-31T00:00:00Z",
             "observedGeneration": 1},
            {"type": C.SCALING_LIMITED, "status": "True", "reason": R.TOO_FEW_REPLICAS,
             "message": "the load needs 0; minReplicas is 1",
             "lastTransitionTime": "2025-12-31T00:00:00Z", "observedGeneration": 1},
        ],
    }
    return {**base, **changes}


def later(seconds: float = 20.0, **changes: Any) -> dict[str, Any]:
    """The status the next pass computes ``seconds`` later: its per-pass times moved."""
    status = written(**changes)
    stamp = (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status["observed"] = {**status["observed"], "time": stamp}
    status["control"] = {"state": {**status["control"]["state"], "lastTime": T0S + seconds}}
    return status


def observed(**values: Any) -> dict[str, Any]:
    return {**written()["observed"], **values}


def condition(ctype: str, **fields: Any) -> list[dict[str, Any]]:
    return [{**c, **fields} if c["type"] == ctype else c for c in written()["conditions"]]


@pytest.mark.parametrize(
    ("new", "loop", "memory", "after", "want"),
    [
        pytest.param(later(), True, False, 20, None,
                     id="a-pass-over-an-unchanged-service-plans-no-status-write"),
        pytest.param(later(observed=observed(e2eMs=431.0, requestRate=12.9, running=6.4)),
                     True, False, 20, None, id="signals-jittering-around-a-steady-value-wait"),
        pytest.param(later(observed=observed(e2eMs=480.0)), True, False, 20, "observed",
                     id="a-p99-up-by-a-sixth-is-written-at-once"),
        pytest.param(later(observed=observed(queue=0.6)), True, False, 20, None,
                     id="a-fraction-of-a-request-queued-is-below-the-floor"),
        pytest.param(later(observed=observed(queue=3.0)), True, False, 20, "observed",
                     id="a-queue-of-three-is-written"),
        pytest.param(later(observed=observed(state="Stale")), True, False, 20, "observed",
                     id="a-new-signal-state-is-written"),
        pytest.param(later(observed=observed(ttftMs=None)), True, False, 20, "observed",
                     id="a-signal-gone-missing-is-written"),
        pytest.param(later(desiredReplicas=3), True, False, 20, "desiredReplicas",
                     id="a-changed-decision-is-written-at-once"),
        pytest.param(later(batchLimit=48), True, False, 20, "batchLimit",
                     id="a-changed-batch-limit-is-written-at-once"),
        pytest.param(later(sloCompliant=False), True, False, 20, "sloCompliant",
                     id="a-new-slo-verdict-is-written"),
        pytest.param(later(conditions=condition(C.SLO_COMPLIANT, message="e2e 430ms > 400ms")),
                     True, False, 20, None,
                     id="a-measured-condition-re-quoting-a-jittering-value-waits"),
        pytest.param(later(conditions=condition(
            C.SLO_COMPLIANT, message="e2e 430ms > 400ms, ttft 310ms > 300ms")), True, False,
            20, "condition:SLOCompliant",
            id="a-measured-condition-naming-another-objective-is-written"),
        pytest.param(later(conditions=condition(C.SCALING_LIMITED, reason=R.GPU_BUDGET)),
                     True, False, 20, "condition:ScalingLimited",
                     id="a-new-condition-reason-is-written"),
        pytest.param(later(conditions=condition(C.READY, message="1/2 replicas ready")),
                     True, False, 20, "condition:Ready",
                     id="numbers-count-in-conditions-that-quote-no-measurement"),
        pytest.param(later(attainment=0.9954, errorBudgetRemaining=0.5004), True, False, 20,
                     None, id="attainment-moving-less-than-a-tenth-of-a-point-waits"),
        pytest.param(later(attainment=0.993), True, False, 20, "attainment",
                     id="attainment-down-by-two-tenths-of-a-point-is-written"),
        pytest.param(later(errorBudgetRemaining=None), True, False, 20, "errorBudgetRemaining",
                     id="an-error-budget-gone-unknown-is-written"),
        pytest.param(later(), True, True, 20, "memory",
                     id="a-memory-the-law-reads-differently-is-written"),
        pytest.param(later(HEARTBEAT_S - 1), True, False, HEARTBEAT_S - 1, None,
                     id="no-heartbeat-before-its-period"),
        pytest.param(later(HEARTBEAT_S), True, False, HEARTBEAT_S, "heartbeat",
                     id="the-heartbeat-writes-after-its-period"),
        pytest.param(written(), False, False, HEARTBEAT_S * 3, None,
                     id="only-an-slo-pass-has-a-heartbeat"),
    ],
)
def test_status_write(new: dict[str, Any], loop: bool, memory: bool, after: float,
                      want: str | None) -> None:
    now = T0 + timedelta(seconds=after)
    assert status_write(written(), new, now, loop=loop, memory_changed=memory) == want


def test_a_first_slo_pass_is_written() -> None:
    before = {k: v for k, v in written().items() if k not in ("observed", "control")}
    assert status_write(before, written(), T0, loop=True) == "observed"


@pytest.mark.parametrize(
    ("stamp", "after", "due"),
    [
        pytest.param(None, 0.0, True, id="never-written"),
        pytest.param("not a time", 0.0, True, id="unreadable"),
        pytest.param("2026-01-01T00:00:00Z", HEARTBEAT_S - 0.5, False, id="fresh"),
        pytest.param("2026-01-01T00:00:00Z", HEARTBEAT_S, True, id="due"),
    ],
)
def test_heartbeat_due(stamp: str | None, after: float, due: bool) -> None:
    assert heartbeat_due(stamp, T0S + after) is due


def test_written_at_reads_observed_time() -> None:
    assert written_at("2026-01-01T00:00:20Z") == T0S + 20
    assert written_at(None) is None
