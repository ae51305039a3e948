"""plan_reconcile as a table: snapshot, body and ``now`` in, the planned writes out.

No API client anywhere: the planner is pure, so each row states the writes a reconcile
*would* make (``describe`` of each action, in order) for one situation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.cluster import Snapshot
from slo_operator.reconcile.actions import Apply, PostEvent, describe
from slo_operator.reconcile.planner import ReconcilePlan, Settings, plan_reconcile
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.status import SLOUpdate
from tests.operator.reconcile.test_service import (
    NOW,
    NS,
    READY_DEP,
    RUNNING,
    VARIANT,
    make_isvc,
    make_policy,
    make_snapshot,
)

DEPLOYMENT = f"Deployment/chat-vllm-{VARIANT}"
TWO = make_policy(scaling={"minReplicas": 2, "maxReplicas": 2})
SETTLED = make_snapshot(policies=(TWO,), dep=READY_DEP, pods=RUNNING)
LATER = NOW + timedelta(seconds=20)


def applied_after(plan: ReconcilePlan) -> AppliedCache:
    """The cache as the executor leaves it once every planned apply succeeded."""
    cache = AppliedCache()
    for action in plan.actions:
        if isinstance(action, Apply):
            cache.remember(action.obj, plan.now.timestamp())
    return cache


# The first reconcile of a service running two Ready replicas; rows start from its result.
FIRST = plan_reconcile(make_isvc(), SETTLED, NOW, Settings())


def settled(**spec: Any) -> dict[str, Any]:
    """The service as the cache holds it after FIRST was written (``spec`` edits bump the
    generation)."""
    body = make_isvc(status=dict(FIRST.status), **spec)
    if spec:
        body["metadata"]["generation"] = 2
    return body


def refused_lately(message: str) -> AppliedCache:
    cache = applied_after(FIRST)
    service = next(a.obj for a in FIRST.actions if isinstance(a, Apply)
                   and a.kind == "Service")
    cache.forget("Service", NS, "chat")
    cache.reject(service, LATER.timestamp() - 5, message)
    return cache


# A Deployment from a release without variants sits next to the Ready H100 variant.
LEGACY = replace(READY_DEP, name="chat-vllm", variant="")
WITH_LEGACY = replace(
    SETTLED,
    variant_deployments={(NS, "chat"): {VARIANT: replace(READY_DEP, variant=VARIANT,
                                                         name=f"chat-vllm-{VARIANT}"),
                                        "": LEGACY}})


@dataclass(frozen=True)
class Row:
    body: dict[str, Any]
    snap: Snapshot
    applied: AppliedCache | None = None
    update: SLOUpdate | None = None
    now: datetime = LATER


@pytest.mark.parametrize(
    ("row", "want_actions", "want_events", "want_retry"),
    [
        pytest.param(
            Row(make_isvc(), SETTLED, now=NOW),
            [f"apply {DEPLOYMENT}", "apply Service/chat", "apply PodDisruptionBudget/chat-vllm",
             "status InferenceService/chat"],
            [("Normal", C.AVAILABLE), ("Normal", C.HARDWARE_FOUND),
             ("Normal", C.AWAITING_METRICS)], None,
            id="a-new-service-applies-its-three-objects-then-writes-status-and-announces-it"),
        pytest.param(
            Row(settled(engine={"gpuMemoryUtilization": 0.85}), SETTLED, applied_after(FIRST)),
            [f"apply {DEPLOYMENT}", "status InferenceService/chat"], [], None,
            id="a-spec-change-applies-only-the-deployment-whose-rendering-changed"),
        pytest.param(
            Row(settled(), SETTLED, applied_after(FIRST)), [], [], None,
            id="an-unchanged-service-plans-no-write-at-all-not-even-status"),
        pytest.param(
            Row(settled(), replace(SETTLED, deployments={}, variant_deployments={}),
                applied_after(FIRST)),
            [f"apply {DEPLOYMENT}", "status InferenceService/chat"], None, None,
            id="a-deployment-gone-from-the-cache-is-applied-again-though-applied-lately"),
        pytest.param(
            Row(settled(), WITH_LEGACY, applied_after(FIRST)),
            ["delete Deployment/chat-vllm"], [], None,
            id="a-variant-no-pool-offers-is-deleted-once-the-others-are-ready"),
        pytest.param(
            Row(settled(), SETTLED, applied_after(FIRST),
                SLOUpdate(replicas=2, batch_limit=48, reason="LoadFell", message="m")),
            ["patch Pod/p-1 limit=48", "patch Pod/p-2 limit=48", "status InferenceService/chat"],
            [("Normal", C.BATCH_LIMIT_CHANGED)], None,
            id="a-lower-batch-limit-patches-the-pods-and-never-the-deployment"),
        pytest.param(
            Row(settled(), SETTLED, applied_after(FIRST),
                SLOUpdate(replicas=2, batch_limit=256, reason="Steady", message="m")),
            ["status InferenceService/chat"], [], None,
            id="a-first-decision-that-changes-nothing-records-itself-in-status-only"),
        pytest.param(
            Row(settled(), SETTLED, refused_lately("spec.ports[0].port: Invalid value: 0")),
            ["status InferenceService/chat"], [("Warning", C.APPLY_FAILED)], 30,
            id="an-object-refused-lately-is-not-sent-again-and-the-status-says-why"),
        pytest.param(
            Row(make_isvc(policy="absent"), SETTLED, now=NOW),
            ["status InferenceService/chat"],
            [("Warning", C.POLICY_NOT_FOUND), ("Warning", C.POLICY_NOT_FOUND)], 30,
            id="a-missing-policy-applies-nothing-and-waits"),
    ],
)
def test_plan_reconcile_lists_the_writes_in_order(
        row: Row, want_actions: list[str], want_events: list[tuple[str, str]] | None,
        want_retry: float | None) -> None:
    plan = plan_reconcile(row.body, row.snap, row.now, Settings(), row.applied, row.update)
    events = [a for a in plan.actions if isinstance(a, PostEvent)]
    assert [describe(a) for a in plan.actions if not isinstance(a, PostEvent)] == want_actions
    if want_events is not None:
        assert sorted((e.type, e.reason) for e in events) == sorted(want_events)
    assert plan.retry_after == want_retry


def test_planning_reads_the_applied_cache_and_never_changes_it() -> None:
    cache = refused_lately("refused")
    before = (dict(cache.entries), dict(cache.rejected))
    plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), cache)
    assert (cache.entries, cache.rejected) == before


def test_an_invalid_spec_plans_only_its_status_and_is_permanent() -> None:
    body = make_isvc()
    body["spec"]["model"]["sizeBillions"] = -1
    plan = plan_reconcile(body, SETTLED, NOW, Settings())
    assert plan.permanent_error and "spec.model.sizeBillions" in plan.permanent_error
    assert [describe(a) for a in plan.actions if not isinstance(a, PostEvent)] == [
        "status InferenceService/chat"]
    assert plan.refusal is None  # nothing to apply, nothing to refuse


def test_the_writes_come_in_the_order_the_executor_must_keep() -> None:
    """Applies first (a refusal stops everything after it), then deletes, pod patches,
    the status and the Events."""
    update = SLOUpdate(replicas=2, batch_limit=48, reason="LoadFell", message="m")
    plan = plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), AppliedCache(), update)
    kinds = [type(a).__name__ for a in plan.actions]
    order = ["Apply", "Delete", "PatchPodLimit", "PatchStatus", "PostEvent"]
    assert kinds == sorted(kinds, key=order.index)
    assert set(kinds) == set(order)
