"""The kopf handlers are thin: they share the refresh step below them (that no handler
imports another is an import-linter contract), and an SLOPolicy edit decides for its bound
services at once."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from typing import Any, cast

import kopf
import pytest

from slo_operator.api.activation import ANNOTATION_WAKE, Wake
from slo_operator.api.cluster import Snapshot
from slo_operator.api.observe import ServiceKey
from slo_operator.handlers import indexes
from slo_operator.handlers.inference_service import on_wake
from slo_operator.handlers.setup import Context
from slo_operator.handlers.slo_policy import on_policy
from slo_operator.reconcile.caches import INDEX_NAMES, snapshot
from slo_operator.reconcile.planner import plan_reconcile
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from tests.operator.reconcile.fake import FakeKube
from tests.operator.reconcile.prom_fake import FakeMetrics
from tests.operator.reconcile.test_loop import QUIET, planned
from tests.operator.reconcile.test_service import NOW, make_isvc, make_policy
from tests.operator.reconcile.test_wake import WITH_ACTIVATOR, at_zero, zero_snapshot


def test_the_snapshot_reads_exactly_the_indexes_the_handlers_register() -> None:
    for name in INDEX_NAMES:
        assert callable(getattr(indexes, name)), name
    registered = {n for n, v in vars(indexes).items() if n.endswith("_index") and callable(v)}
    assert registered == set(INDEX_NAMES)


def index_kwargs(snap: Snapshot) -> dict[str, Any]:
    """The handler kwargs kopf passes for the indexes, holding what ``snap`` holds."""
    return {
        "service_index": {k: [v] for k, v in snap.services.items()},
        "policy_index": {k: [v] for k, v in snap.policies.items()},
        "deployment_index": {k: list(v.values()) for k, v in snap.variant_deployments.items()},
        "pod_index": {k: list(v) for k, v in snap.pods.items()},
        "node_index": {"nodes": list(snap.nodes)},
        "price_index": {},
        "tenant_index": {k: [v] for k, v in snap.tenants.items()},
        "namespace_index": {k: [v] for k, v in snap.namespace_labels.items()},
        "activator_index": {k: [v] for k, v in snap.activators.items()},
        "route_index": {k: [v] for k, v in snap.routes.items()},
    }


def test_the_snapshot_of_the_index_kwargs_is_what_they_hold() -> None:
    _, snap, _ = planned()
    snap = replace(snap, tenants={"acme": {"spec": {"namespaces": ["team-a"]}}},
                   namespace_labels={"team-a": {"team": "a"}})
    again = snapshot(index_kwargs(snap))
    assert (again.tenants, again.namespace_labels) == (snap.tenants, snap.namespace_labels)
    assert (again.services, again.policies, again.pods, again.variant_deployments,
            tuple(again.nodes)) == (snap.services, snap.policies,
                                    {k: tuple(v) for k, v in snap.pods.items()},
                                    snap.variant_deployments, tuple(snap.nodes))


def run_policy_handler(reason: str, body: Mapping[str, Any],
                       snap: Snapshot) -> tuple[FakeKube, FakeMetrics]:
    kube = FakeKube()
    metrics = FakeMetrics({ServiceKey("team-a", "chat"): QUIET})
    memo = kopf.Memo()
    memo.slo = Context(kube=cast(Any, kube), settings=Settings(), metrics=metrics)
    # kopf's decorators type the handler loosely; it is the coroutine function defined.
    call = on_policy(body=cast(kopf.Body, body), memo=memo, reason=reason, **index_kwargs(snap))
    asyncio.run(cast(Coroutine[Any, Any, None], call))
    return kube, metrics


@pytest.mark.parametrize(
    ("reason", "want_queries", "want_decided"),
    [
        pytest.param(kopf.Reason.UPDATE, 1, True, id="a-spec-edit-decides-at-once"),
        pytest.param(kopf.Reason.CREATE, 1, True, id="a-new-policy-decides-at-once"),
        pytest.param(kopf.Reason.RESUME, 0, False,
                     id="a-restart-only-refreshes-and-leaves-deciding-to-the-pass"),
    ],
)
def test_an_slo_policy_change_decides_for_its_bound_services(
        reason: str, want_queries: int, want_decided: bool) -> None:
    _, snap, _ = planned()
    edited = make_policy(scaling={"minReplicas": 3, "maxReplicas": 8})
    edited["metadata"]["namespace"] = "team-a"
    kube, metrics = run_policy_handler(reason, edited, snap)
    assert len(metrics.calls) == want_queries
    service_statuses = [s for s in kube.statuses if "desiredReplicas" in s]
    assert service_statuses and service_statuses[-1]["desiredReplicas"] == 3
    assert bool(service_statuses[-1].get("observed")) is want_decided
    # The policy's own status records the binding either way.
    assert any(s.get("boundServices") == ["chat"] for s in kube.statuses)


def test_the_service_cache_keeps_what_the_operator_reads_and_drops_the_rest() -> None:
    body, snap, _ = planned()
    wire = {**body, "metadata": {
        **body["metadata"], "labels": {"app": "chat"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}" * 500},
        "managedFields": [{"manager": "slo-operator", "fieldsV1": {"f:status": {}}}] * 20},
        "status": {**body["status"], "kopf": {"progress": {"on_change": {"retries": 1}}}}}
    cached = indexes.slim(wire)
    assert set(cached["metadata"]) == {"name", "namespace", "uid", "generation"}
    assert cached["spec"] == body["spec"] and cached["status"] == body["status"]
    wire["status"]["desiredReplicas"] = 7  # detached from kopf's body
    assert cached["status"]["desiredReplicas"] == body["status"]["desiredReplicas"]
    # The slimmed body reconciles as the whole one does.
    kube_a, kube_b = FakeKube(), FakeKube()
    for kube, svc in ((kube_a, body), (kube_b, cached)):
        reconcile_service_sync(kube, svc, snap, NOW, Settings())
    assert kube_a.applies == kube_b.applies and kube_a.statuses == kube_b.statuses


def test_a_wake_annotation_decides_for_its_service_at_once() -> None:
    """The activator's wake reaches the operator as an annotation change; the handler
    decides for that one service right away (not at the next pass): up from zero."""
    first = plan_reconcile(at_zero(), zero_snapshot(), NOW, WITH_ACTIVATOR)
    body = make_isvc(status=dict(first.status))
    wake = Wake(requested_at=NOW.timestamp() - 1.0, held=2).to_annotation()
    body["metadata"]["annotations"] = {ANNOTATION_WAKE: wake}
    snap = replace(zero_snapshot(), services={("team-a", "chat"): indexes.slim(body)})
    kube, metrics = FakeKube(), FakeMetrics()
    memo = kopf.Memo()
    memo.slo = Context(kube=cast(Any, kube), settings=WITH_ACTIVATOR, metrics=metrics)
    call = on_wake(body=cast(kopf.Body, body), memo=memo, new=wake, **index_kwargs(snap))
    asyncio.run(cast(Coroutine[Any, Any, None], call))
    assert len(metrics.calls) == 1
    statuses = [s for s in kube.statuses if "desiredReplicas" in s]
    assert statuses and statuses[-1]["desiredReplicas"] == 1
    assert [kind for kind, _ in kube.applies].count("Deployment") == 1  # scaled up


def test_a_wake_record_reaching_the_cache_before_the_woken_status_keeps_the_service_up(
        ) -> None:
    """The activator's next record (it gave up: no replica in time) changes the object
    while the operator's status write that woke the service is still on its way to the
    cache: the new revision holds the new annotation and the old status (zero)."""
    first = plan_reconcile(at_zero(), zero_snapshot(), NOW, WITH_ACTIVATOR)
    kube, metrics = FakeKube(), FakeMetrics()
    memo = kopf.Memo()
    memo.slo = Context(kube=cast(Any, kube), settings=WITH_ACTIVATOR, metrics=metrics)
    woken = Wake(requested_at=NOW.timestamp() - 1.0, held=1)
    for revision, wake in enumerate((woken, replace(woken, timed_out_at=NOW.timestamp()))):
        body = make_isvc(status=dict(first.status))  # the cache: still at zero
        body["metadata"]["resourceVersion"] = str(revision + 1)
        body["metadata"]["annotations"] = {ANNOTATION_WAKE: wake.to_annotation()}
        snap = replace(zero_snapshot(), services={("team-a", "chat"): indexes.slim(body)})
        call = on_wake(body=cast(kopf.Body, body), memo=memo, new=wake.to_annotation(),
                       **index_kwargs(snap))
        asyncio.run(cast(Coroutine[Any, Any, None], call))
    statuses = [s for s in kube.statuses if "desiredReplicas" in s]
    assert [s["desiredReplicas"] for s in statuses][-1] == 1
    assert all(s["desiredReplicas"] == 1 for s in statuses)


def test_the_service_cache_keeps_the_wake_annotation_and_no_other() -> None:
    body, _, _ = planned()
    wake = Wake(requested_at=1.0).to_annotation()
    wire = {**body, "metadata": {**body["metadata"], "annotations": {
        ANNOTATION_WAKE: wake, "note": "x" * 1000}}}
    assert indexes.slim(wire)["metadata"]["annotations"] == {ANNOTATION_WAKE: wake}
