"""GPU nodes lost under Running replicas, with the real operator and control plane.

Each test makes its own fake GPU nodes, labelled and tainted (NoSchedule) for it alone:
only its services select and tolerate them, so no other suite's service lands on them.
A node is lost with ``kubectl delete node``; the replacement replicas must run on the
pools that remain (the same product's other nodes, or the next product the service
allows) with the GPUs counted right (docs/placement.md, docs/reliability.md "Node loss").

What the control plane does for a lost node: kwok stops managing a deleted node but
evicts nothing, so its pods stay bound to the missing node, Running and Ready as last
written. The kube-controller-manager's pod garbage collector (``podgc``, on through
``--controllers=*`` in devtools/slo_devtools/devenv/control_plane.py; no flag there changes
its timing) force-deletes them once the node has been gone for its quarantine of 40 s,
checked every 20 s (kubernetes pkg/controller/podgc/gc_controller.go, ``quarantineTime``
and ``gcCheckPeriod``). Only then does a ReplicaSet replace them. The operator must not wait
for that: pods bound to a node that no longer exists serve nothing and hold no GPU.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_devtools.devenv.gpu_nodes import node_manifest, nvidia_node_type
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    OperatorProcess,
    chart_operator,
    conditions,
    deployments_of,
    events_for,
)

pytestmark = pytest.mark.integration

# The label and taint key of this module's nodes; the value names one test's nodes.
SUITE_KEY = "node-loss.slo-operator.io/suite"
# NVML names, compute capabilities and framebuffer sizes (MiB) as NVML reports them.
GPUS = {
    "H200": ("NVIDIA H200", (9, 0), 143771),
    "L40S": ("NVIDIA L40S", (8, 9), 46068),
    "A10G": ("NVIDIA A10G", (8, 6), 23028),
}
# The podgc quarantine (see above): a replacement Running sooner did not wait for it.
PODGC_QUARANTINE_S = 40


@pytest.fixture(scope="module")
def operator(cluster: LocalCluster,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with chart_operator(cluster, tmp_path_factory.mktemp("node-loss"), interval=2.0,
                        log_tail=6000) as op:
        yield op


@pytest.fixture
def nodes(cluster: LocalCluster) -> Iterator[tuple[str, Callable[[str, int], str]]]:
    """(this test's label value, a function adding one node of a product with n GPUs and
    returning its name); the nodes are deleted afterwards."""
    suite = f"nl-{uuid.uuid4().hex[:6]}"
    made: list[str] = []

    def add(product: str, gpus: int) -> str:
        nvml, compute, memory = GPUS[product]
        t = nvidia_node_type(product.lower(), nvml_name=nvml, compute=compute,
                             memory_mib=memory, gpus=gpus)
        t = dataclasses.replace(t, labels={**t.labels, SUITE_KEY: suite})
        name = f"{suite}-{t.key}-{sum(1 for n in made if f'-{t.key}-' in n)}"
        body = node_manifest(name, t)
        body["spec"]["taints"] = [{"key": SUITE_KEY, "value": suite, "effect": "NoSchedule"}]
        cluster.core.create_node(kubernetes.client.V1Node.model_validate(body))
        made.append(name)
        cluster.wait_nodes_ready([name])
        return name

    try:
        yield suite, add
    finally:
        for name in made:
            cluster.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def _service(name: str, suite: str, products: list[str], replicas: int) -> list[dict[str, Any]]:
    """A policy pinning ``replicas`` and a 3B-parameter service of one GPU per replica
    allowed on ``products`` (in that order), on the test's own nodes only."""
    policy = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
              "metadata": {"name": name},
              "spec": {"scaling": {"minReplicas": replicas, "maxReplicas": replicas}}}
    svc = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": f"org/{name}", "sizeBillions": 3, "maxModelLen": 4096},
            "sloPolicyRef": {"name": name},
            "hardware": {
                "gpuProducts": products,
                "gpusPerReplica": 1,
                "nodeSelector": {SUITE_KEY: suite},
                "tolerations": [{"key": SUITE_KEY, "operator": "Equal", "value": suite,
                                 "effect": "NoSchedule"}],
            },
        },
    }
    return [policy, svc]


def _apply(cluster: LocalCluster, ns: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))


def _pods(cluster: LocalCluster, ns: str, service: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                 f"{GROUP}/service={service}")["items"]
    return list(items)


def _running_on(cluster: LocalCluster, ns: str, service: str) -> dict[str, int]:
    """Running, not terminating pods of ``service`` per node."""
    out: dict[str, int] = {}
    for p in _pods(cluster, ns, service):
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            node = p["spec"]["nodeName"]
            out[node] = out.get(node, 0) + 1
    return out


def _status(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    st: dict[str, Any] = cluster.kubectl_json("get", "infsvc", "-n", ns, name).get(
        "status") or {}
    return st


def _await_status(cluster: LocalCluster, ns: str, name: str,
                  check: Callable[[dict[str, Any]], bool], *, timeout: float,
                  desc: str) -> dict[str, Any]:
    """The service's status once ``check`` holds for it."""
    def found() -> Any:  # the status, or None (falsy) until it holds
        st = _status(cluster, ns, name)
        return st if check(st) else None

    st: dict[str, Any] = cluster.wait_for(found, timeout=timeout, desc=desc)
    return st


def _gpus_bound(cluster: LocalCluster, node: str) -> int:
    """GPUs asked for by the live pods bound to ``node``, in every namespace."""
    pods = cluster.kubectl_json("get", "pods", "-A", "--field-selector",
                                f"spec.nodeName={node}")["items"]
    total = 0
    for p in pods:
        if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") not in (
                "Pending", "Running"):
            continue
        for c in p["spec"]["containers"]:
            total += int(((c.get("resources") or {}).get("limits") or {}).get(
                "nvidia.com/gpu", "0"))
    return total


def _variants(st: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(v["product"], v["desiredReplicas"], v["readyReplicas"])
            for v in st.get("variants") or []]


def _clean_operator(op: OperatorProcess) -> None:
    logs = op.logs()
    assert "Traceback" not in logs, logs[-4000:]
    assert op.healthy()


def test_a_lost_node_s_replicas_spill_at_once_and_return_to_its_pool_after_pod_gc(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str,
    nodes: tuple[str, Callable[[str, int], str]],
) -> None:
    suite, add = nodes
    h200_a, l40s, a10g = add("H200", 2), add("L40S", 3), add("A10G", 2)
    # "resident" holds 2 of the L40S node's 3 GPUs; "mover" fills the first H200 node.
    _apply(cluster, namespace, _service("resident", suite, ["L40S"], 2)
           + _service("mover", suite, ["H200", "L40S"], 2))
    cluster.wait_for(lambda: _running_on(cluster, namespace, "resident") == {l40s: 2}
                     and _running_on(cluster, namespace, "mover") == {h200_a: 2},
                     timeout=90, desc="resident on L40S, mover on H200, all Running")
    # A second, smaller H200 node joins the pool: room for one of the mover's replicas.
    h200_b = add("H200", 1)
    lost = {p["metadata"]["name"] for p in _pods(cluster, namespace, "mover")}

    cluster.kubectl("delete", "node", h200_a, "--wait=true")
    deadline = time.monotonic() + PODGC_QUARANTINE_S - 5

    # The lost pods serve nothing and hold no GPU: the operator counts the H200 pool's room
    # as the new node's one GPU and spills the other replica to L40S, and the H200 variant
    # reports no Ready replica, before the pod garbage collector has removed the lost pods.
    cluster.wait_for(lambda: _running_on(cluster, namespace, "mover").get(l40s) == 1,
                     timeout=deadline - time.monotonic(),
                     desc="a replacement Running on L40S before the lost pods are collected")
    st = _await_status(
        cluster, namespace, "mover",
        lambda s: _variants(s) == [("H200-SXM-141GB", 1, 0), ("L40S-48GB", 1, 1)],
        timeout=max(1.0, deadline - time.monotonic()),
        desc="status: H200 variant 1 desired, 0 Ready; L40S 1 Ready")
    assert lost <= {p["metadata"]["name"] for p in _pods(cluster, namespace, "mover")}
    assert "spilled past H200-SXM-141GB" in (st.get("placement") or ""), st.get("placement")
    spills = [e["message"] for e in events_for(cluster, namespace, "mover")
              if e["reason"] == "Placed"]
    assert any("spilled past H200-SXM-141GB" in m for m in spills), spills

    # Once the collector removes the lost pods, the H200 variant's replacement runs on the
    # pool's remaining node; every node holds at most its GPUs.
    cluster.wait_for(
        lambda: _running_on(cluster, namespace, "mover") == {h200_b: 1, l40s: 1}
        and not lost & {p["metadata"]["name"] for p in _pods(cluster, namespace, "mover")},
        timeout=120, desc="lost pods collected; mover on the H200 node left and on L40S")
    st = _await_status(
        cluster, namespace, "mover",
        lambda s: s.get("readyReplicas") == 2
        and _variants(s) == [("H200-SXM-141GB", 1, 1), ("L40S-48GB", 1, 1)]
        # A pass that still saw the replacement unschedulable may write this placement
        # before the pass that sees it scheduled: await the latter's Ready condition.
        and conditions({"status": s}).get("Ready", {}).get("reason") == "Available",
        timeout=30, desc="mover's status shows the new placement, Available")
    ready = conditions({"status": st})["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Available"), ready
    assert {n: _gpus_bound(cluster, n) for n in (h200_a, h200_b, l40s)} == {
        h200_a: 0, h200_b: 1, l40s: 3}

    # A latecomer preferring L40S: that pool is full (no lost GPU counted free or twice),
    # so it goes to A10G at once instead of waiting Pending.
    _apply(cluster, namespace, _service("latecomer", suite, ["L40S", "A10G"], 1))
    cluster.wait_for(lambda: _running_on(cluster, namespace, "latecomer") == {a10g: 1},
                     timeout=60, desc="latecomer Running on the A10G node")
    late = _status(cluster, namespace, "latecomer")
    assert "L40S-48GB full (0 free GPUs)" in (late.get("placement") or ""), late
    assert [p["status"]["phase"] for p in _pods(cluster, namespace, "latecomer")] == ["Running"]
    _clean_operator(operator)


def test_a_lost_pool_s_replicas_move_to_the_next_product_and_its_variant_is_retired(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str,
    nodes: tuple[str, Callable[[str, int], str]],
) -> None:
    suite, add = nodes
    h200, l40s = add("H200", 2), add("L40S", 4)
    _apply(cluster, namespace, _service("mover", suite, ["H200", "L40S"], 2))
    cluster.wait_for(lambda: _running_on(cluster, namespace, "mover") == {h200: 2},
                     timeout=90, desc="mover Running on H200")

    cluster.kubectl("delete", "node", h200, "--wait=true")

    # The pool is gone with its only node: the replicas run on L40S, and the H200 variant's
    # Deployment is deleted once they are Ready, without waiting for the pod collector.
    cluster.wait_for(lambda: _running_on(cluster, namespace, "mover") == {l40s: 2},
                     timeout=PODGC_QUARANTINE_S - 5, desc="mover's replicas Running on L40S")

    def retired(st: dict[str, Any]) -> bool:
        deps = {d["metadata"]["name"] for d in deployments_of(cluster, namespace, "mover")}
        return deps == {"mover-vllm-l40s-48gb"} and _variants(st) == [("L40S-48GB", 2, 2)]

    st = _await_status(cluster, namespace, "mover", retired, timeout=30,
                       desc="H200 variant retired, status written")
    conds = conditions({"status": st})
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("True", "Available")
    assert conds["HardwareResolved"]["status"] == "True"
    assert "L40S" in conds["HardwareResolved"]["message"], conds["HardwareResolved"]
    assert st["hardware"]["product"] == "L40S-48GB"
    assert _gpus_bound(cluster, l40s) == 2
    _clean_operator(operator)
