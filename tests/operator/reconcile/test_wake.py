"""Scale to zero's route, status and condition (``reconcile.wake.plan_wake``), and the
planner carrying them out: the activator's EndpointSlice while no replica is Ready, gone
once one is; what the activator recorded of a wake in ``status.scaleToZero``; ``Awake``."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.activation import (
    ANNOTATION_WAKE,
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    SLICE_MANAGED_BY,
    ActivatorEndpoints,
    Wake,
)
from slo_operator.api.cluster import DeploymentObs, Snapshot
from slo_operator.api.models import ScaleToZeroStatus
from slo_operator.api.observe import ServiceKey
from slo_operator.reconcile.actions import Apply, Delete
from slo_operator.reconcile.loop import observe_and_decide
from slo_operator.reconcile.planner import Settings, plan_reconcile
from slo_operator.reconcile.wake import WakePlan, plan_wake
from slo_operator.render.objects import RenderInput, service_name
from tests.operator.reconcile.prom_fake import FakeMetrics
from tests.operator.reconcile.test_service import (
    NOW,
    NS,
    READY_DEP,
    RUNNING,
    make_isvc,
    make_policy,
    make_snapshot,
)

RENDER = RenderInput(name="chat", namespace=NS, uid="uid-1", engine_image="vllm:x",
                     runtime_image="rt:x", engine_args=())
ACTIVATOR = ActivatorEndpoints(("10.0.0.7", "10.0.0.8"), 8012)
T = NOW.timestamp()


def plan(*, desired: int = 1, ready: int = 1, wake: Wake | None = None,
         route: str | None = None, old: ScaleToZeroStatus | None = None,
         configured: bool = True, scale_to_zero: bool = True,
         activator: ActivatorEndpoints | None = ACTIVATOR) -> WakePlan:
    return plan_wake(RENDER, scale_to_zero=scale_to_zero, desired=desired, ready=ready,
                     wake=wake, activator=activator, configured=configured, route=route,
                     old=old, now=NOW)


def test_at_zero_the_service_routes_to_the_activators_ready_pods() -> None:
    p = plan(desired=0, ready=0)
    assert p.obj is not None and p.force and p.delete is None
    labels = p.obj["metadata"]["labels"]  # type: ignore[index]
    assert labels[LABEL_SERVICE_NAME] == service_name("chat")
    assert labels[LABEL_SLICE_MANAGED_BY] == SLICE_MANAGED_BY
    assert p.obj["ports"] == [{"name": "http", "port": 8012, "protocol": "TCP"}]
    assert [e["addresses"] for e in p.obj["endpoints"]] == [  # type: ignore[union-attr]
        ["10.0.0.7"], ["10.0.0.8"]]
    assert p.obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # type: ignore[index]
    assert p.cond is not None and (p.cond.status, p.cond.reason) == (False, C.SCALED_TO_ZERO)
    assert p.status is not None and p.status.routed_to_activator
    assert p.status.zero_since is not None


def test_a_route_already_there_is_applied_only_as_the_cache_says() -> None:
    p = plan(desired=0, ready=0, route="chat-activator")
    assert p.obj is not None and not p.force


def test_starting_replicas_keep_the_route_and_a_ready_one_removes_it() -> None:
    starting = plan(desired=1, ready=0, route="chat-activator")
    assert starting.obj is not None and starting.delete is None
    assert starting.cond is not None and starting.cond.reason == C.WAKING
    ready = plan(desired=1, ready=1, route="chat-activator")
    assert ready.obj is None
    assert ready.delete == Delete("EndpointSlice", NS, "chat-activator")
    assert ready.status is not None and not ready.status.routed_to_activator
    assert ready.cond is not None and (ready.cond.status, ready.cond.reason) == (
        True, C.AWAKE_SERVING)


def test_the_zero_time_stays_while_at_zero_and_goes_when_awake() -> None:
    first = plan(desired=0, ready=0)
    later = plan_wake(RENDER, scale_to_zero=True, desired=0, ready=0, wake=None,
                      activator=ACTIVATOR, configured=True, route="chat-activator",
                      old=first.status, now=NOW + timedelta(minutes=5))
    assert later.status is not None and first.status is not None
    assert later.status.zero_since == first.status.zero_since
    assert plan(desired=1, ready=1, old=first.status).status.zero_since is None  # type: ignore[union-attr]


def test_a_wake_is_reported_as_waking_then_woken_counting_one_cold_start() -> None:
    held = Wake(requested_at=T - 30, held=3, by="activator-0")
    waking = plan(desired=1, ready=0, wake=held, old=ScaleToZeroStatus(cold_starts=2))
    assert waking.cond is not None and (waking.cond.status, waking.cond.reason) == (
        False, C.WAKING)
    assert waking.status is not None and waking.status.cold_starts == 2
    assert waking.status.last_wake_requests == 3
    served = Wake(requested_at=T - 30, held=3, served_at=T - 5, waited_s=25.0)
    woken = plan(desired=1, ready=1, wake=served, old=waking.status)
    assert woken.cond is not None and (woken.cond.status, woken.cond.reason) == (
        True, C.WOKEN)
    assert woken.status is not None
    assert (woken.status.cold_starts, woken.status.last_wake_wait_seconds) == (3, 25.0)
    again = plan(desired=1, ready=1, wake=served, old=woken.status)
    assert again.status is not None and again.status.cold_starts == 3  # counted once


def test_a_wake_the_activator_gave_up_on_is_reported() -> None:
    timed_out = Wake(requested_at=T - 400, held=2, timed_out_at=T - 100)
    p = plan(desired=1, ready=0, wake=timed_out)
    assert p.cond is not None and (p.cond.status, p.cond.reason) == (False, C.WAKE_TIMED_OUT)
    assert p.status is not None and p.status.last_wake_timed_out is not None


def test_without_an_activator_the_condition_says_why_the_service_never_sleeps() -> None:
    p = plan(desired=1, ready=1, configured=False, activator=None, route="chat-activator")
    assert p.obj is None and p.delete is not None
    assert p.cond is not None and (p.cond.status, p.cond.reason) == (True, C.NO_ACTIVATOR)


def test_a_policy_without_scale_to_zero_keeps_no_route_and_no_condition() -> None:
    assert plan(scale_to_zero=False) == WakePlan()
    gone = plan(scale_to_zero=False, route="chat-activator")
    assert gone == WakePlan(delete=Delete("EndpointSlice", NS, "chat-activator"))


def test_an_activator_with_no_ready_pod_still_gets_the_route_and_the_message_says_so(
) -> None:
    p = plan(desired=0, ready=0, activator=None)
    assert p.obj is not None and p.obj["endpoints"] == []
    assert p.cond is not None and "no Ready pod" in p.cond.message


def test_messages_of_scale_to_zero_read_as_pinned(golden: Any) -> None:
    cases = {
        "zero": plan(desired=0, ready=0),
        "waking": plan(desired=1, ready=0, wake=Wake(requested_at=T - 30, held=3)),
        "starting": plan(desired=1, ready=0),
        "woken": plan(desired=1, ready=1, wake=Wake(requested_at=T - 30, held=3,
                                                     served_at=T - 5, waited_s=25.0)),
        "timed-out": plan(desired=1, ready=0, wake=Wake(requested_at=T - 400, held=2,
                                                        timed_out_at=T - 100)),
        "serving": plan(desired=2, ready=2),
        "no-activator": plan(configured=False),
    }
    for name, p in cases.items():
        assert p.cond is not None
        golden.check("scale-to-zero", f"awake.{name}", p.cond.message)


ZERO_POLICY = make_policy(scaling={"minReplicas": 1, "maxReplicas": 2, "scaleToZero": True})
WITH_ACTIVATOR = Settings(activator=("slo-system", "slo-operator-activator"))


def zero_snapshot(**changes: Any) -> Snapshot:
    snap = make_snapshot(policies=(ZERO_POLICY,), dep=DeploymentObs(0, 0, 0, 1, 1,
                                                                  spec_replicas=0))
    return replace(snap, activators={WITH_ACTIVATOR.activator: ACTIVATOR},  # type: ignore[dict-item]
                   **changes)


def at_zero(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return make_isvc(status=status or {"desiredReplicas": 0})


def test_the_planner_keeps_a_service_at_zero_routed_to_the_activator() -> None:
    p = plan_reconcile(at_zero(), zero_snapshot(), NOW, WITH_ACTIVATOR)
    applied = [a.obj for a in p.actions if isinstance(a, Apply)]
    assert [o["kind"] for o in applied].count("EndpointSlice") == 1
    assert all(o["spec"]["replicas"] == 0 for o in applied if o["kind"] == "Deployment")
    assert p.status["desiredReplicas"] == 0
    assert p.status["scaleToZero"]["routedToActivator"] is True
    awake = {c["type"]: c for c in p.status["conditions"]}[C.AWAKE]
    assert (awake["status"], awake["reason"]) == ("False", C.SCALED_TO_ZERO)


def test_without_an_activator_the_planner_brings_a_service_at_zero_back_to_one() -> None:
    p = plan_reconcile(at_zero(), zero_snapshot(), NOW, Settings())
    assert p.status["desiredReplicas"] == 1
    assert not [a for a in p.actions if isinstance(a, Apply)
                and a.obj["kind"] == "EndpointSlice"]


def test_the_planner_deletes_the_route_once_a_replica_is_ready() -> None:
    snap = make_snapshot(policies=(ZERO_POLICY,), dep=READY_DEP, pods=RUNNING)
    snap = replace(snap, activators={WITH_ACTIVATOR.activator: ACTIVATOR},  # type: ignore[dict-item]
                   routes={(NS, "chat"): "chat-activator"})
    p = plan_reconcile(make_isvc(status={"desiredReplicas": 2}), snap, NOW, WITH_ACTIVATOR)
    assert Delete("EndpointSlice", NS, "chat-activator") in p.actions


def test_the_pass_holds_a_service_at_zero_quietly_and_a_wake_brings_it_back() -> None:
    """Through ``observe_and_decide``: at zero there are no series, which is no Warning
    (MetricsAvailable stays True); the activator's wake annotation asks for a replica."""
    first = plan_reconcile(at_zero(), zero_snapshot(), NOW, WITH_ACTIVATOR)
    body = make_isvc(status=dict(first.status))
    later = NOW + timedelta(seconds=30)

    def update(body: dict[str, Any]) -> Any:
        snap = replace(zero_snapshot(), services={(NS, "chat"): body})
        return asyncio.run(observe_and_decide(FakeMetrics({}), snap, later,
                                              WITH_ACTIVATOR))[ServiceKey(NS, "chat")]

    quiet = update(body)
    assert (quiet.replicas, quiet.reason) == (0, "ScaledToZero")
    metrics = {c.type: c for c in quiet.conds}[C.METRICS_AVAILABLE]
    assert (metrics.status, metrics.reason) == (True, C.NO_TRAFFIC)
    wake = Wake(requested_at=later.timestamp() - 1, held=1)
    body["metadata"]["annotations"] = {ANNOTATION_WAKE: wake.to_annotation()}
    woken = update(body)
    assert (woken.replicas, woken.reason) == (1, "Woken")
