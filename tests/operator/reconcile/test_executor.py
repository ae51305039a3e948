"""execute() against the in-memory writer: the plan's writes in order, and refusals."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.cluster import ApiRejected
from slo_operator.reconcile.actions import Apply, Delete, PatchPodLimit, describe
from slo_operator.reconcile.executor import execute
from slo_operator.reconcile.planner import Settings, plan_reconcile
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.status import SLOUpdate
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT
from tests.operator.reconcile.fake import FakeKube
from tests.operator.reconcile.test_planner import LATER, SETTLED, WITH_LEGACY, settled
from tests.operator.reconcile.test_service import NOW, NS, VARIANT, make_isvc

REFUSAL = 'Service "chat" is invalid: spec.ports[0].port: Invalid value: 0'
LOWER = SLOUpdate(replicas=2, batch_limit=48, reason="LoadFell", message="m")


def ready(status: dict[str, Any]) -> tuple[str, str, str]:
    cond = next(c for c in status["conditions"] if c["type"] == C.READY)
    return cond["status"], cond["reason"], cond["message"]


def test_every_planned_write_is_made_in_order_and_reported() -> None:
    plan = plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), AppliedCache(), LOWER)
    kube, cache = FakeKube(), AppliedCache()
    out = execute(kube, plan, cache)
    applies = [describe(a).removeprefix("apply ") for a in plan.actions if isinstance(a, Apply)]
    assert [f"{k}/{n}" for k, n in kube.applies] == applies
    assert kube.deletes == [("Deployment", NS, "chat-vllm")]
    assert kube.pod_patches == [
        (p, {"metadata": {"annotations": {ANNOTATION_INFLIGHT_LIMIT: "48"}}})
        for p in ("p-1", "p-2")]
    assert kube.statuses == [plan.status]
    assert out.status == plan.status
    assert out.applied == [*applies, "Deployment/chat-vllm deleted",
                           "Pod/p-1 limit=48", "Pod/p-2 limit=48"]
    assert [(t, r) for t, r, _ in kube.events] == [(e.type, e.reason) for e in out.events]
    # What was applied is remembered: the same plan again would not be sent.
    assert all(cache.fresh(a.obj, LATER.timestamp())
               for a in plan.actions if isinstance(a, Apply))
    assert out.fleet == plan.fleet


def test_a_refused_apply_stops_there_and_reports_apply_failed_instead() -> None:
    # A new service on a cluster where its pods already run (p-1, p-2 want a new limit),
    # so the plan holds applies, pod patches and a status after the Service.
    plan = plan_reconcile(make_isvc(), SETTLED, NOW, Settings(), AppliedCache(), LOWER)
    planned = [describe(a) for a in plan.actions]
    assert "apply PodDisruptionBudget/chat-vllm" in planned
    assert any(isinstance(a, PatchPodLimit) for a in plan.actions)
    kube, cache = FakeKube(refuse={"Service": REFUSAL}), AppliedCache()
    out = execute(kube, plan, cache)

    # Nothing after the refused Service is touched.
    assert kube.attempts == [("Deployment", f"chat-vllm-{VARIANT}"), ("Service", "chat")]
    assert kube.pod_patches == [] and kube.deletes == []
    assert out.applied == [f"Deployment/chat-vllm-{VARIANT}"]
    # The planned status (the decision) went first; the refusal is reported over it: Ready
    # False with the server's own message, the hardware and engine settings planned, and
    # the decision still recorded, so the next attempt carries it out.
    assert kube.statuses == [plan.status, out.status] and out.status != plan.status
    status, reason, message = ready(out.status)
    assert (status, reason) == ("False", C.APPLY_FAILED)
    assert "spec.ports[0].port" in message and "Service chat" in message
    assert out.status["hardware"]["product"]
    assert {k: v for k, v in out.status.items() if k != "conditions"} == {
        k: v for k, v in plan.status.items() if k != "conditions"}
    assert out.status["lastDecisions"] == plan.status["lastDecisions"]
    assert ("Warning", C.APPLY_FAILED) in [(t, r) for t, r, _ in kube.events]
    assert not [e for e in kube.events if e[1] == C.BATCH_LIMIT_CHANGED]
    # The back-off starts at 30 s; the Deployment that went through is remembered.
    assert out.retry_after == 30
    service = next(a.obj for a in plan.actions if isinstance(a, Apply) and a.kind == "Service")
    assert cache.backoff(service, NOW.timestamp() + 10) == f"Service chat: {REFUSAL}"
    deployment = next(a.obj for a in plan.actions if isinstance(a, Apply))
    assert cache.fresh(deployment, NOW.timestamp())


def test_a_refusal_after_the_back_off_doubles_it() -> None:
    cache = AppliedCache()
    plan = plan_reconcile(make_isvc(), SETTLED, NOW, Settings(), cache)
    execute(FakeKube(refuse={"Service": REFUSAL}), plan, cache)
    later = NOW + timedelta(seconds=60)
    again = plan_reconcile(make_isvc(), SETTLED, later, Settings(), cache)
    out = execute(FakeKube(refuse={"Service": REFUSAL}), again, cache)
    assert out.retry_after == 60


def test_a_refused_delete_is_skipped_and_the_rest_goes_on() -> None:
    plan = plan_reconcile(settled(), WITH_LEGACY, LATER, Settings(), AppliedCache(), LOWER)
    assert any(isinstance(a, Delete) for a in plan.actions)
    kube = FakeKube(refuse_delete={"Deployment": "forbidden"})
    out = execute(kube, plan, AppliedCache())
    assert not [a for a in out.applied if a.endswith("deleted")]
    assert [n for n, _ in kube.pod_patches] == ["p-1", "p-2"]
    assert kube.statuses == [plan.status] and out.retry_after is None


def test_an_empty_plan_writes_nothing() -> None:
    plan = plan_reconcile(make_isvc(), SETTLED, NOW, Settings())
    kube = FakeKube()
    out = execute(kube, replace(plan, actions=()), AppliedCache())
    assert kube.writes == 0 and out.applied == [] and out.events == []


def test_a_limit_just_patched_is_not_patched_again_while_the_cache_lags() -> None:
    """The pods' cache entries still show the old limit a moment after the patch: the
    next reconcile sends nothing; once the echo window is over (a limit someone else set
    back, say) it is sent again."""
    cache = AppliedCache()
    kube = FakeKube()
    execute(kube, plan_reconcile(settled(), SETTLED, LATER, Settings(), cache, LOWER), cache)
    assert [n for n, _ in kube.pod_patches] == ["p-1", "p-2"]
    again = FakeKube()
    soon = LATER + timedelta(seconds=1)
    execute(again, plan_reconcile(settled(), SETTLED, soon, Settings(), cache, LOWER), cache)
    assert again.pod_patches == []
    late = FakeKube()
    later = LATER + timedelta(seconds=60)
    execute(late, plan_reconcile(settled(), SETTLED, later, Settings(), cache, LOWER), cache)
    assert [n for n, _ in late.pod_patches] == ["p-1", "p-2"]


@pytest.mark.parametrize("status", [409, 429, 500, 503])
def test_a_refusal_of_the_moment_is_raised_for_a_retry_not_reported_or_backed_off(
        status: int) -> None:
    plan = plan_reconcile(make_isvc(), SETTLED, NOW, Settings(), AppliedCache(), LOWER)
    kube = FakeKube(refuse={"Service": "the server is busy"}, refuse_status=status)
    cache = AppliedCache()
    with pytest.raises(ApiRejected) as raised:
        execute(kube, plan, cache)
    assert raised.value.transient
    service = next(a.obj for a in plan.actions if isinstance(a, Apply) and a.kind == "Service")
    assert cache.backoff(service, NOW.timestamp() + 1) is None
    assert not [e for e in kube.events if e[1] == C.APPLY_FAILED]
    assert all(ready(s)[1] != C.APPLY_FAILED for s in kube.statuses)
