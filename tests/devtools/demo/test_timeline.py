"""Samples from InferenceService status, and the summary the demo writes."""

from __future__ import annotations

from typing import Any

import pytest

from slo_devtools.demo.timeline import (
    Targets,
    decision_history,
    offered_rate,
    sample,
    summarize,
)
from slo_operator.api import conditions as C


def make_svc(*, ns: str = "tenant-chat", name: str = "chat", replicas: int | None = 2,
             ready: int | None = 2, limit: int | None = 64, p99: float | None = None,
             ttft: float | None = None, slo: str | None = None,
             decisions: list[dict[str, Any]] | None = None,
             status_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"replicas": replicas, "readyReplicas": ready,
                              "desiredReplicas": replicas, "batchLimit": limit,
                              "hardware": {"product": "NVIDIA-H100-80GB-HBM3"}}
    status = {k: v for k, v in status.items() if v is not None}
    if p99 is not None or ttft is not None:
        status["observed"] = {"e2eMs": p99, "ttftMs": ttft, "throughputCV": 0.1,
                              "requestRate": 3.5}
    if slo is not None:
        status["conditions"] = [{"type": C.SLO_COMPLIANT,
                                 "status": {C.SLO_MET: "True", C.SLO_MISSED: "False"}.get(
                                     slo, "Unknown"),
                                 "reason": slo, "message": f"{slo} message"}]
    if decisions is not None:
        status["lastDecisions"] = decisions
    status.update(status_extra or {})
    return {"metadata": {"namespace": ns, "name": name}, "spec": {}, "status": status}


POLICY = {"metadata": {"namespace": "tenant-chat", "name": "gold"},
          "spec": {"objectives": {"e2eLatencyMs": 6000, "ttftMs": 500,
                                  "throughputCVMax": 0.2}}}


def dec(time: str, replicas: int, limit: int | None, reason: str = "SLO") -> dict[str, Any]:
    return {"time": time, "replicas": replicas, "batchLimit": limit, "reason": reason,
            "message": f"{reason} at {time}"}


def test_sample_reads_status_policy_and_offered_load() -> None:
    s = sample(12.0, make_svc(p99=7100.0, ttft=420.0, slo=C.SLO_MISSED,
                              decisions=[dec("t1", 2, 64, "ScaleOut")]), POLICY, 4.5)
    assert (s.t, s.service, s.gpu) == (12.0, "tenant-chat/chat", "NVIDIA-H100-80GB-HBM3")
    assert (s.replicas, s.ready, s.desired, s.batch_limit) == (2, 2, 2, 64)
    assert (s.e2e_ms, s.ttft_ms, s.jitter, s.request_rate) == (7100.0, 420.0, 0.1, 3.5)
    assert s.offered_rps == 4.5
    assert s.targets == Targets(6000.0, 0.99, 500.0, 0.95, 0.2, itl_ms=None)
    assert s.slo_state == C.SLO_MISSED
    assert s.last_decision is not None and s.last_decision.reason == "ScaleOut"


@pytest.mark.parametrize(
    ("svc", "policy", "want_targets", "want_slo"),
    [
        pytest.param({"metadata": {"namespace": "a", "name": "b"}}, None, None, "-",
                     id="fresh-object-without-status"),
        pytest.param(make_svc(), {"spec": {}}, Targets(800.0, 0.99, 300.0, 0.95, None), "-",
                     id="policy-defaults"),
        pytest.param(make_svc(), {"spec": {"objectives": {"ttftMs": -1}}}, None, "-",
                     id="invalid-policy-has-no-targets"),
        pytest.param(make_svc(), {"spec": {"objectives": {"interTokenLatencyMs": 75}}},
                     Targets(800.0, 0.99, 300.0, 0.95, None, itl_ms=75.0), "-",
                     id="inter-token-target-when-set"),
        pytest.param(make_svc(status_extra={"replicas": "many"}), POLICY,
                     Targets(6000.0, 0.99, 500.0, 0.95, 0.2), "-",
                     id="unreadable-status-is-empty-not-an-error"),
    ],
)
def test_sample_tolerates_partial_objects(svc: dict[str, Any], policy: dict[str, Any] | None,
                                          want_targets: Targets | None, want_slo: str) -> None:
    s = sample(0.0, svc, policy, None)
    assert s.targets == want_targets
    assert s.slo_state == want_slo


@pytest.mark.parametrize(
    ("t", "window", "want"),
    [(10.0, 5.0, 3 / 5), (5.0, 5.0, 2 / 5), (100.0, 5.0, 0.0), (7.0, 10.0, 5 / 7),
     (0.0, 5.0, 1 / 5)],
)
def test_offered_rate_counts_arrivals_in_the_trailing_window(t: float, window: float,
                                                             want: float) -> None:
    arrivals = [0.0, 1.0, 4.9, 6.0, 7.0, 9.5]
    assert offered_rate(arrivals, t, window) == pytest.approx(want)


def test_offered_rate_rejects_an_empty_window() -> None:
    with pytest.raises(ValueError, match="window"):
        offered_rate([1.0], 1.0, 0.0)


def test_decision_history_merges_overlapping_status_snapshots() -> None:
    a = sample(0.0, make_svc(decisions=[dec("t1", 1, 64), dec("t2", 2, 64)]), POLICY, None)
    b = sample(1.0, make_svc(decisions=[dec("t2", 2, 64), dec("t3", 2, 32)]), POLICY, None)
    assert [d.time for d in decision_history([b, a])] == ["t1", "t2", "t3"]


def test_summary_counts_scale_outs_ins_and_limit_changes_from_decisions() -> None:
    history = [dec("t1", 1, 64, "Initial"), dec("t2", 3, 64, "ScaleOut"),
               dec("t3", 3, 32, "LimitDown"), dec("t4", 2, 32, "ScaleIn"),
               dec("t5", 1, 48, "ScaleIn")]
    samples = [
        sample(0.0, make_svc(replicas=1, ready=1, limit=64, decisions=history[:1],
                             p99=5000.0, ttft=300.0, slo=C.SLO_MET), POLICY, 2.0),
        sample(2.0, make_svc(replicas=3, ready=3, limit=32, decisions=history[:3],
                             p99=9000.0, ttft=800.0, slo=C.SLO_MISSED), POLICY, 6.0),
        sample(4.0, make_svc(replicas=1, ready=1, limit=48, decisions=history,
                             slo=C.AWAITING_METRICS), POLICY, 1.0),
    ]
    [s] = summarize(samples)
    assert (s.scale_outs, s.scale_ins, s.limit_changes) == (1, 2, 2)
    assert (s.replicas_min, s.replicas_max) == (1, 3)
    assert (s.batch_limit_min, s.batch_limit_max) == (32, 64)
    assert (s.e2e_max_ms, s.ttft_max_ms) == (9000.0, 800.0)
    # Ready replicas integrated as a step function: 1 for 2 s, then 3 for 2 s.
    assert s.replica_seconds == pytest.approx(8.0)
    assert s.offered_requests == pytest.approx(2.0 * 2 + 6.0 * 2)
    # AwaitingMetrics is not judged; one met, one missed.
    assert s.compliant_fraction == pytest.approx(0.5)
    assert [d["reason"] for d in s.decisions] == ["Initial", "ScaleOut", "LimitDown", "ScaleIn",
                                                  "ScaleIn"]


def test_summary_has_one_entry_per_service_in_order() -> None:
    samples = [sample(0.0, make_svc(ns="b", name="x"), None, None),
               sample(0.0, make_svc(ns="a", name="y"), None, None)]
    assert [s.service for s in summarize(samples)] == ["a/y", "b/x"]
    s = summarize(samples)[0]
    assert (s.scale_outs, s.scale_ins, s.limit_changes, s.compliant_fraction) == (0, 0, 0, None)
