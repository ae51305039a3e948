"""reconcile_service_sync as tables against the in-memory fake: what is written, when."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slo_operator.api import conditions as C
from slo_operator.api.cluster import DeploymentObs, NodeInfo, PodObs, Snapshot
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT
from tests.operator.reconcile.fake import FakeKube

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NS = "team-a"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.count": "8"}
NODES = (NodeInfo("h100-a", H100, {"nvidia.com/gpu": "8"}),)


def make_isvc(name: str = "chat", policy: str | None = "gold", status: dict[str, Any] | None = None,
              **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "inference.slo-operator.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS, "uid": "uid-1", "generation": 1,
                     "resourceVersion": "1"},
        "spec": {"model": {"name": "org/m", "sizeBillions": 8, "maxModelLen": 4096},
                 "hardware": {"gpuProducts": ["H100"]}, **spec},
    }
    if policy:
        body["spec"]["sloPolicyRef"] = {"name": policy}
    if status is not None:
        body["status"] = status
    return body


def make_policy(name: str = "gold", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": spec}


VARIANT = "h100-sxm-80gb"  # the variant id of the H100 pool above


def make_snapshot(policies: tuple[dict[str, Any], ...] = (make_policy(),),
                  dep: DeploymentObs | None = None, pods: tuple[PodObs, ...] = (),
                  nodes: tuple[NodeInfo, ...] = NODES) -> Snapshot:
    """The caches as the indexes fill them: the Deployment and pods of the H100 variant."""
    dep = replace(dep, variant=VARIANT, name=f"chat-vllm-{VARIANT}") if dep else None
    return Snapshot(
        policies={(NS, p["metadata"]["name"]): p for p in policies},
        deployments={(NS, "chat"): dep} if dep else {},
        variant_deployments={(NS, "chat"): {VARIANT: dep}} if dep else {},
        pods={(NS, "chat"): tuple(replace(p, variant=VARIANT, gpu_product="H100-SXM-80GB",
                                          gpus=1, gpu_resource="nvidia.com/gpu",
                                          node="" if p.unschedulable else "h100-a")
                                  for p in pods)},
        nodes=nodes,
    )


def run(body: dict[str, Any], snap: Snapshot, applied: AppliedCache | None = None,
        now: datetime = NOW) -> tuple[FakeKube, Any]:
    kube = FakeKube()
    outcome = reconcile_service_sync(kube, body, snap, now, Settings(), applied)
    return kube, outcome


def conds(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions", [])}


READY_DEP = DeploymentObs(2, 2, 2, 1, 1, spec_replicas=2)
RUNNING = (PodObs("p-1", "Running", ready=True, inflight_limit=256),
           PodObs("p-2", "Running", ready=True, inflight_limit=256))


@pytest.mark.parametrize(
    ("body", "snap", "want_applies", "want_conds", "want_events", "want_retry"),
    [
        pytest.param(make_isvc(), make_snapshot(policies=(make_policy(scaling={
            "minReplicas": 2, "maxReplicas": 4}),)),
            ["Deployment", "Service", "PodDisruptionBudget"],
            {C.READY: ("False", C.NOT_READY),
             C.POLICY_BOUND: ("True", C.POLICY_RESOLVED),
             C.HARDWARE_RESOLVED: ("True", C.HARDWARE_FOUND),
             C.SLO_COMPLIANT: ("Unknown", C.AWAITING_METRICS)},
            [("Warning", C.NOT_READY), ("Normal", C.HARDWARE_FOUND),
             ("Normal", C.AWAITING_METRICS)], None, id="new-service-applies-three-objects"),
        pytest.param(make_isvc(policy="absent"), make_snapshot(), [],
                     {C.READY: ("False", C.POLICY_NOT_FOUND),
                      C.POLICY_BOUND: ("False", C.POLICY_NOT_FOUND)},
                     [("Warning", C.POLICY_NOT_FOUND), ("Warning", C.POLICY_NOT_FOUND)], 30,
                     id="missing-policy-waits"),
        pytest.param(make_isvc(), replace(
            make_snapshot(policies=(make_policy(tenant="acme"),)),
            tenants={"acme": {"metadata": {"name": "acme"}, "spec": {"namespaces": ["other"]}}}),
            [], {C.READY: ("False", C.POLICY_TENANT_REFUSED),
                 C.POLICY_BOUND: ("False", C.POLICY_TENANT_REFUSED)},
            [("Warning", C.POLICY_TENANT_REFUSED), ("Warning", C.POLICY_TENANT_REFUSED)], 30,
            id="policy-claiming-anothers-tenant-waits"),
        pytest.param(make_isvc(policy=None), make_snapshot(policies=()),
                     ["Deployment", "Service", "PodDisruptionBudget"],
                     {C.POLICY_BOUND: ("True", C.DEFAULT_POLICY)}, None, None,
                     id="no-policy-ref-uses-defaults"),
        pytest.param(make_isvc(hardware={"gpuProducts": ["B200"]}), make_snapshot(), [],
                     {C.READY: ("False", C.NO_MATCHING_NODES),
                      C.HARDWARE_RESOLVED: ("False", C.NO_MATCHING_NODES)}, None, 60,
                     id="no-pool-is-a-condition"),
        pytest.param(make_isvc(engine={"extraArgs": ["--no-such-flag"]}), make_snapshot(), [],
                     {C.READY: ("False", C.ENGINE_INFEASIBLE),
                      C.HARDWARE_RESOLVED: ("True", C.HARDWARE_FOUND)}, None, 60,
                     id="engine-problem-keeps-hardware-resolved"),
        pytest.param(make_isvc(), make_snapshot(dep=DeploymentObs(1, 1, 1, 1, 1, 1), pods=(
            PodObs("p-1", "Running", ready=True),
            PodObs("p-2", "Pending", True, "0/3 nodes are available: 3 Insufficient "
                   "nvidia.com/gpu."))),
            ["Deployment", "Service", "PodDisruptionBudget"],
            {C.READY: ("True", C.INSUFFICIENT_GPUS),
             C.PROGRESSING: ("False", C.INSUFFICIENT_GPUS)}, None, None,
            id="ready-but-a-pod-waits-for-gpus"),
    ],
)
def test_reconcile_table(body: dict[str, Any], snap: Snapshot, want_applies: list[str],
                         want_conds: dict[str, tuple[str, str]],
                         want_events: list[tuple[str, str]] | None,
                         want_retry: float | None) -> None:
    kube, outcome = run(body, snap)
    assert [k for k, _ in kube.applies] == want_applies
    got = conds(outcome.status)
    for ctype, want in want_conds.items():
        assert got[ctype] == want, ctype
    if want_events is not None:
        assert sorted((t, r) for t, r, _ in kube.events) == sorted(want_events)
    assert outcome.retry_after == want_retry


def test_invalid_spec_is_permanent_and_names_the_field() -> None:
    body = make_isvc()
    body["spec"]["model"]["sizeBillions"] = -1
    kube, outcome = run(body, make_snapshot())
    assert outcome.permanent_error and "spec.model.sizeBillions" in outcome.permanent_error
    assert conds(outcome.status)[C.SPEC_VALID] == ("False", C.INVALID_SPEC)
    assert kube.applies == []


def test_second_pass_over_an_unchanged_service_writes_nothing() -> None:
    applied = AppliedCache()
    snap = make_snapshot(policies=(make_policy(scaling={"minReplicas": 2, "maxReplicas": 2}),),
                         dep=READY_DEP, pods=RUNNING)
    first, outcome = run(make_isvc(), snap, applied)
    assert first.applies and first.statuses
    body = make_isvc(status=outcome.status)
    second, _ = run(body, snap, applied, NOW + timedelta(seconds=20))
    assert second.writes == 0


def test_unchanged_objects_are_applied_again_after_the_ttl_or_when_the_deployment_drifts() -> None:
    applied = AppliedCache(ttl=600)
    snap = make_snapshot(policies=(make_policy(scaling={"minReplicas": 2, "maxReplicas": 2}),),
                         dep=READY_DEP, pods=RUNNING)
    _, outcome = run(make_isvc(), snap, applied)
    body = make_isvc(status=outcome.status)
    later, _ = run(body, snap, applied, NOW + timedelta(seconds=601))
    assert [k for k, _ in later.applies] == ["Deployment", "Service", "PodDisruptionBudget"]
    scaled_by_hand = make_snapshot(
        policies=(make_policy(scaling={"minReplicas": 2, "maxReplicas": 2}),),
        dep=replace(READY_DEP, spec_replicas=5), pods=RUNNING)
    drift, _ = run(body, scaled_by_hand, applied, NOW + timedelta(seconds=620))
    assert [k for k, _ in drift.applies] == ["Deployment"]
    gone = replace(snap, deployments={}, variant_deployments={})
    deleted, _ = run(body, gone, applied, NOW + timedelta(seconds=640))
    assert [k for k, _ in deleted.applies] == ["Deployment"]


@pytest.mark.parametrize(
    ("mode", "state_limit", "pods", "want_patched", "want_limit"),
    [
        pytest.param("live", 32, RUNNING, ["p-1", "p-2"], 32, id="live-limit-patched-on-pods"),
        pytest.param("live", 32, (PodObs("p-1", "Running", inflight_limit=32),
                                  PodObs("p-2", "Pending")), ["p-2"], 32,
                     id="only-differing-pods-patched"),
        pytest.param("live", None, (PodObs("p-1", "Running"),), ["p-1"], 128,
                     id="new-pod-starts-at-the-ceiling"),
        pytest.param("off", 32, RUNNING, ["p-1", "p-2"], 128, id="off-holds-the-ceiling"),
        pytest.param("restart", 32, (PodObs("p-1", "Running", inflight_limit=32),), [], 32,
                     id="restart-mode-limit-is-the-engine-ceiling"),
    ],
)
def test_live_limit_by_mode(mode: str, state_limit: int | None, pods: tuple[PodObs, ...],
                            want_patched: list[str], want_limit: int) -> None:
    policy = make_policy(batching={"mode": mode, "minBatch": 8, "maxBatch": 128})
    status = {"batchLimit": state_limit} if state_limit else None
    kube, outcome = run(make_isvc(status=status), make_snapshot(policies=(policy,), pods=pods))
    assert [n for n, _ in kube.pod_patches] == want_patched
    for _, patch in kube.pod_patches:
        assert patch == {"metadata": {"annotations": {ANNOTATION_INFLIGHT_LIMIT:
                                                      str(want_limit)}}}
    assert outcome.status["batchLimit"] == want_limit
    dep = kube.objects[("Deployment", NS, f"chat-vllm-{VARIANT}")]
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert ANNOTATION_INFLIGHT_LIMIT not in annotations


def test_a_refused_object_is_a_condition_one_event_and_a_back_off() -> None:
    applied = AppliedCache()
    snap = make_snapshot(dep=READY_DEP, pods=RUNNING)
    message = 'Service "chat" is invalid: spec.ports[0].port: Invalid value: 0'
    kube = FakeKube(refuse={"Service": message})
    out = reconcile_service_sync(kube, make_isvc(), snap, NOW, Settings(), applied)
    ready = next(c for c in out.status["conditions"] if c["type"] == C.READY)
    assert (ready["status"], ready["reason"]) == ("False", C.APPLY_FAILED)
    assert "spec.ports[0].port" in ready["message"] and "Service chat" in ready["message"]
    assert [(t, r) for t, r, _ in kube.events if r == C.APPLY_FAILED] == [
        ("Warning", C.APPLY_FAILED)]
    assert out.retry_after == 30
    assert out.status["hardware"]["product"]  # what was planned is still reported

    # Within the back-off the same object is not sent again, and nothing is re-announced.
    body = make_isvc(status=out.status)
    again = FakeKube(refuse={"Service": message})
    reconcile_service_sync(again, body, snap, NOW + timedelta(seconds=10), Settings(), applied)
    assert ("Service", "chat") not in again.attempts
    assert again.events == [] and again.statuses == []

    # After it, the object is tried again; accepted, the service recovers.
    fixed = FakeKube()
    out = reconcile_service_sync(fixed, body, snap, NOW + timedelta(seconds=31), Settings(),
                                 applied)
    assert ("Service", "chat") in fixed.applies
    ready = next(c for c in out.status["conditions"] if c["type"] == C.READY)
    assert ready["reason"] != C.APPLY_FAILED


def test_a_ready_pod_of_a_lost_node_is_not_counted_ready() -> None:
    """Until the pod garbage collector removes them, pods of a deleted node stay Running
    and Ready, and their Deployment counts them: the service must not."""
    snap = make_snapshot(dep=READY_DEP, pods=RUNNING)
    key = (NS, "chat")
    first, second = snap.pods[key]
    snap = replace(snap, pods={key: (first, replace(second, node="h100-gone"))})
    body = make_isvc(status={"desiredReplicas": 2})
    _, outcome = run(body, snap)
    assert outcome.status["readyReplicas"] == 1
    assert [v["readyReplicas"] for v in outcome.status["variants"]] == [1]
    assert conds(outcome.status)[C.READY] == ("False", C.NOT_READY)
    _, whole = run(body, make_snapshot(dep=READY_DEP, pods=RUNNING))
    assert conds(whole.status)[C.READY][0] == "True"


def test_lost_pods_of_a_retired_variant_take_nothing_from_the_ready_count() -> None:
    """The retired variant's Deployment is gone, its pods on the lost node not collected
    yet: they are counted by no Deployment, so nothing is taken off the Ready count."""
    snap = make_snapshot(dep=READY_DEP, pods=RUNNING)
    key = (NS, "chat")
    orphans = tuple(replace(p, name=f"old-{p.name}", variant="h200-sxm-141gb",
                            node="h200-gone") for p in snap.pods[key])
    snap = replace(snap, pods={key: (*snap.pods[key], *orphans)})
    _, outcome = run(make_isvc(status={"desiredReplicas": 2}), snap)
    assert outcome.status["readyReplicas"] == 2
    assert conds(outcome.status)[C.READY][0] == "True"
