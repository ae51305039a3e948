"""A service on a mixed fleet: variants per pool, spill, return, scale-in and retirement,
through reconcile_service_sync against the in-memory writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.cluster import DeploymentObs, NodeInfo, PodObs, Snapshot
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_operator.reconcile.status import SLOUpdate
from slo_operator.render.objects import LABEL_VARIANT
from tests.operator.reconcile.fake import FakeKube
from tests.operator.reconcile.test_service import make_policy

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NS = "team-a"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.count": "2"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "4"}
NODES = (NodeInfo("h100-a", H100, {"nvidia.com/gpu": "2"}),
         NodeInfo("a100-a", A100, {"nvidia.com/gpu": "4"}))
HV, AV = "h100-sxm-80gb", "a100-sxm4-80gb"
PRODUCT = {HV: "H100-SXM-80GB", AV: "A100-SXM4-80GB"}
NODE = {HV: "h100-a", AV: "a100-a"}


def isvc(status: dict[str, Any] | None = None, **hardware: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.slo-operator.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": NS, "uid": "uid-1", "generation": 1},
        "spec": {"model": {"name": "org/m", "sizeBillions": 8, "maxModelLen": 4096},
                 "sloPolicyRef": {"name": "gold"}, "hardware": hardware},
        "status": status or {},
    }


def pods(variant: str, ready: int = 0, pending: int = 0, other: str = "") -> list[PodObs]:
    out = [PodObs(f"{other or 'chat'}-{variant}-{i}", "Running", ready=True, inflight_limit=256,
                  variant=variant, gpu_product=PRODUCT[variant], gpus=1,
                  gpu_resource="nvidia.com/gpu", node=NODE[variant]) for i in range(ready)]
    out += [PodObs(f"{other or 'chat'}-{variant}-p{i}", "Pending", unschedulable=True,
                   message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                   variant=variant, gpu_product=PRODUCT[variant], gpus=1,
                   gpu_resource="nvidia.com/gpu") for i in range(pending)]
    return out


def snapshot(deps: dict[str, int], mine: list[PodObs],
             others: Sequence[PodObs] = ()) -> Snapshot:
    variants = {v: DeploymentObs(n, sum(p.ready for p in mine if p.variant == v), n, 1, 1,
                                 spec_replicas=n, name=f"chat-vllm-{v}" if v else "chat-vllm",
                                 variant=v) for v, n in deps.items()}
    total = DeploymentObs.total(list(variants.values()))
    return Snapshot(
        policies={(NS, "gold"): make_policy(scaling={"minReplicas": 1, "maxReplicas": 16})},
        deployments={(NS, "chat"): total} if total else {},
        variant_deployments={(NS, "chat"): variants},
        pods={(NS, "chat"): tuple(mine), (NS, "neighbour"): tuple(others)},
        nodes=NODES,
    )


def reconcile(replicas: int, snap: Snapshot, **hardware: Any) -> tuple[FakeKube, dict[str, Any]]:
    kube = FakeKube()
    update = SLOUpdate(replicas=replicas, batch_limit=256, reason="LoadIncreased", message="m")
    out = reconcile_service_sync(kube, isvc(**hardware), snap, NOW, Settings(), AppliedCache(),
                                 update)
    return kube, out.status


def deployed(kube: FakeKube) -> dict[str, int]:
    return {o["metadata"]["labels"][LABEL_VARIANT]: o["spec"]["replicas"]
            for (kind, _, _), o in kube.objects.items() if kind == "Deployment"}


def test_a_new_service_starts_on_the_cheapest_pool_per_slo_throughput() -> None:
    kube, status = reconcile(2, snapshot({}, []))
    assert deployed(kube) == {HV: 2}  # only variants with replicas get a Deployment
    assert [v["name"] for v in status["variants"]] == [HV, AV]
    assert status["variants"][0]["costPerRequestPerSecond"] < \
        status["variants"][1]["costPerRequestPerSecond"]
    assert "wakes first" in status["placement"]
    service = kube.objects[("Service", NS, "chat")]
    assert LABEL_VARIANT not in service["spec"]["selector"]  # one Service for all variants


def test_a_full_pool_spills_to_the_next_and_says_so() -> None:
    # The neighbour holds both H100 GPUs.
    snap = snapshot({}, [], pods(HV, ready=2, other="neighbour"))
    kube, status = reconcile(3, snap)
    assert deployed(kube) == {AV: 3}
    assert "spilled" in status["placement"]
    placed = [e for e in kube.events if e[1] == C.PLACED]
    assert placed and placed[0][0] == "Normal"


def test_pending_pods_move_to_a_pool_with_room() -> None:
    snap = snapshot({HV: 3}, pods(HV, ready=1, pending=2))
    kube, status = reconcile(3, snap)
    assert deployed(kube) == {HV: 1, AV: 2}
    v = {x["name"]: x for x in status["variants"]}
    assert v[HV]["pendingReplicas"] == 2 and v[AV]["desiredReplicas"] == 2


def test_more_than_the_fleet_waits_on_the_first_pool_with_a_warning() -> None:
    kube, status = reconcile(8, snapshot({}, []))
    assert deployed(kube) == {HV: 4, AV: 4}
    assert any(e[0] == "Warning" and e[1] == C.PLACED for e in kube.events)
    assert "fit no pool" in status["placement"]


def test_return_to_the_better_pool_surges_first_then_scale_in_drops_the_dear_pool() -> None:
    # Two replicas spilled to A100 while H100 was busy; now both H100 GPUs are free.
    snap = snapshot({AV: 2}, pods(AV, ready=2))
    kube, _ = reconcile(2, snap)
    assert deployed(kube) == {HV: 2, AV: 2}  # A100 holds until the H100 replicas are Ready
    done = snapshot({HV: 2, AV: 2}, pods(HV, ready=2) + pods(AV, ready=2))
    kube, status = reconcile(2, done)
    assert deployed(kube) == {HV: 2, AV: 0}
    assert kube.deletes == []  # a variant of a present pool stays, at zero replicas
    assert status["variants"][1]["desiredReplicas"] == 0


def test_gpu_products_restrict_and_order_the_variants() -> None:
    kube, status = reconcile(3, snapshot({}, []), gpuProducts=["A100", "H100"])
    assert deployed(kube) == {AV: 3}
    assert [v["name"] for v in status["variants"]] == [AV, HV]
    kube, status = reconcile(1, snapshot({}, []), gpuProducts=["H100"])
    assert [v["name"] for v in status["variants"]] == [HV]


def test_a_deployment_of_an_older_release_is_retired_once_variants_are_ready() -> None:
    legacy = [PodObs("chat-old-0", "Running", ready=True, inflight_limit=256,
                     gpu_product="H100-SXM-80GB", gpus=1, gpu_resource="nvidia.com/gpu",
                     node="h100-a")]
    kube, _ = reconcile(1, snapshot({"": 1}, legacy))
    assert kube.deletes == []  # the new variant is not Ready yet
    ready = snapshot({"": 1, HV: 1}, legacy + pods(HV, ready=1))
    kube, _ = reconcile(1, ready)
    assert kube.deletes == [("Deployment", NS, "chat-vllm")]


def test_the_fleet_step_pools_the_free_gpus_of_a_multi_variant_service() -> None:
    from slo_operator.api.models import (
        InferenceServiceSpec,
        InferenceServiceStatus,
        SLOPolicySpec,
        VariantStatus,
    )
    from slo_operator.api.observe import ServiceKey
    from slo_operator.reconcile.desired import ServicePlan, plan_service
    from slo_operator.reconcile.gpu_inventory import survey
    from slo_operator.reconcile.loop import ServiceInput, _pool_key, free_by_pool

    snap = snapshot({}, [], pods(HV, ready=1, other="neighbour"))
    fleet = survey(snap)
    spec = InferenceServiceSpec.model_validate(isvc()["spec"])
    plan = plan_service(name="chat", namespace=NS, uid="uid-1", spec=spec,
                        policy=SLOPolicySpec(), policy_name="gold", pools=fleet.pools,
                        nodes=snap.nodes, replicas=1)
    assert isinstance(plan, ServicePlan)
    multi = InferenceServiceStatus(variants=[
        VariantStatus(name=HV, product=PRODUCT[HV]), VariantStatus(name=AV, product=PRODUCT[AV])])
    svc = ServiceInput(ServiceKey(NS, "chat"), spec, SLOPolicySpec(), multi, None, (), plan)
    key = _pool_key(svc)
    assert key == "A100-SXM4-80GB|H100-SXM-80GB"
    free = free_by_pool(fleet, [svc])
    assert free["H100-SXM-80GB"] == 1 and free["A100-SXM4-80GB"] == 4
    assert free[key] == 5


def test_pods_of_a_lost_node_count_as_neither_scheduled_nor_ready() -> None:
    # Both H100 replicas ran on a node that is gone; their pods still read Running and
    # Ready until the pod garbage collector removes them. The H100 pool is left with
    # another node of one GPU.
    gone = [replace(p, node="h100-gone") for p in pods(HV, ready=2)]
    nodes = (NodeInfo("h100-b", H100, {"nvidia.com/gpu": "1"}), NODES[1])
    snap = replace(snapshot({HV: 2}, gone), nodes=nodes)
    kube, status = reconcile(2, snap)
    # One replica fits the node left, the other spills now (no surge-first hold: the lost
    # replicas are not Ready capacity to keep).
    assert deployed(kube) == {HV: 1, AV: 1}
    assert "spilled past H100-SXM-80GB: H100-SXM-80GB full (1 free GPUs)" in status["placement"]
    v = {x["name"]: x for x in status["variants"]}
    assert (v[HV]["desiredReplicas"], v[AV]["desiredReplicas"]) == (1, 1)
    # The same pods while their node is still there are scheduled and Ready: nothing moves.
    kube, _ = reconcile(2, replace(snapshot({HV: 2}, pods(HV, ready=2)),
                                   nodes=(NODES[0], *nodes)))
    assert deployed(kube) == {HV: 2}


def test_a_variant_reports_no_ready_replicas_on_a_lost_node() -> None:
    # The Deployment still counts the lost node's two pods as Ready.
    gone = [replace(p, node="h100-gone") for p in pods(HV, ready=2)]
    nodes = (NodeInfo("h100-b", H100, {"nvidia.com/gpu": "1"}), NODES[1])
    _, status = reconcile(2, replace(snapshot({HV: 2}, gone), nodes=nodes))
    v = {x["name"]: x for x in status["variants"]}
    assert v[HV]["readyReplicas"] == 0


def test_a_retired_variant_waits_for_ready_replicas_on_nodes_that_exist() -> None:
    legacy = [PodObs("chat-old-0", "Running", ready=True, inflight_limit=256,
                     gpu_product="H100-SXM-80GB", gpus=1, gpu_resource="nvidia.com/gpu",
                     node="h100-a")]
    # The new variant's one Ready pod sits on a node that is gone: it serves nothing, so
    # the older release's Deployment keeps serving.
    gone = [replace(p, node="h100-gone") for p in pods(HV, ready=1)]
    kube, _ = reconcile(1, snapshot({"": 1, HV: 1}, legacy + gone))
    assert kube.deletes == []
