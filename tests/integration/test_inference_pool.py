"""The InferencePool against the real API server and the real InferencePool CRD.

The Gateway API Inference Extension's CRD (tests/fixtures/crds/) validates every pool the
operator applies (the API server's schema validation); KWOK GPU nodes run the pods, so the
pool's selector is checked against the pods the Deployments really create.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.adapters.kube import Kube
from slo_operator.api.models import GROUP
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.routing import APPLIED, CRD_MISSING, DISABLED, INFERENCE_POOL_READY
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_runtime.contract import GATEWAY_PORT, LABEL_VARIANT
from tests.integration.operator_support import conditions, install_crds
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.integration

POOL_CRD = FIXTURES / "crds" / "inference.networking.k8s.io_inferencepools.yaml"
POOL_CRD_NAME = "inferencepools.inference.networking.k8s.io"
POOLS = "inferencepools.inference.networking.k8s.io"


def _manifests(replicas: int, enabled: bool = True) -> str:
    # Eight GPUs a replica: the H100 pool (2 nodes x 8) holds two replicas, so a third
    # goes to the A100 pool and the service runs on two variants.
    return f"""
apiVersion: {GROUP}/v1alpha1
kind: SLOPolicy
metadata: {{name: gold}}
spec:
  scaling: {{minReplicas: {replicas}, maxReplicas: {replicas}}}
---
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100, A100], gpusPerReplica: 8}}
  sloPolicyRef: {{name: gold}}
  routing:
    inferencePool:
      enabled: {str(enabled).lower()}
      endpointPickerRef: {{name: chat-epp, port: 9002}}
"""


class Reconciler:
    """One operator's reconcile of ``chat``, against the API server."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.kube = Kube(cluster.api_client())
        self.namespace = namespace
        self.applied = AppliedCache()

    def __call__(self) -> dict[str, Any]:
        snap = self.kube.read_snapshot()
        reconcile_service_sync(self.kube, snap.services[(self.namespace, "chat")], snap,
                               datetime.now(UTC), Settings(discovery=self.kube), self.applied)
        body: dict[str, Any] = self.kube.read_snapshot().services[(self.namespace, "chat")]
        return body


def _pool(cluster: LocalCluster, ns: str) -> dict[str, Any] | None:
    items: list[dict[str, Any]] = cluster.kubectl_json("get", POOLS, "-n", ns)["items"]
    return items[0] if items else None


def _pods(cluster: LocalCluster, ns: str, match: dict[str, str] | None = None
          ) -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", ns]
    if match is not None:
        args += ["-l", ",".join(f"{k}={v}" for k, v in sorted(match.items()))]
    items: list[dict[str, Any]] = cluster.kubectl_json(*args)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def test_without_the_crd_the_service_says_so_and_runs(cluster: LocalCluster,
                                                      namespace: str) -> None:
    install_crds(cluster)
    cluster.kubectl("delete", "crd", POOL_CRD_NAME, "--ignore-not-found", "--wait=true")
    cluster.wait_for(lambda: not Kube(cluster.api_client()).serves(
        "inference.networking.k8s.io/v1", "InferencePool"), timeout=60,
        desc="InferencePool no longer served")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_manifests(1))
    body = Reconciler(cluster, namespace)()
    cond = conditions(body)[INFERENCE_POOL_READY]
    assert (cond["status"], cond["reason"]) == ("False", CRD_MISSING)
    assert POOL_CRD_NAME in cond["message"]
    # Everything else is applied: the pool is an addition, never a blocker.
    deps = cluster.kubectl_json("get", "deploy", "-n", namespace)["items"]
    assert len(deps) == 1
    assert conditions(body)["Ready"]["reason"] != CRD_MISSING


def test_pool_follows_the_service(cluster: LocalCluster, namespace: str) -> None:
    install_crds(cluster)
    cluster.kubectl("apply", "--server-side", "-f", str(POOL_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    f"crd/{POOL_CRD_NAME}")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_manifests(1))
    reconcile = Reconciler(cluster, namespace)
    cluster.wait_for(lambda: reconcile.kube.serves("inference.networking.k8s.io/v1",
                                                   "InferencePool"),
                     timeout=60, desc="InferencePool served")

    # Created, owned by the service, accepted by the real schema.
    body = reconcile()
    assert conditions(body)[INFERENCE_POOL_READY]["reason"] == APPLIED
    pool = _pool(cluster, namespace)
    assert pool is not None
    assert pool["spec"]["targetPorts"] == [{"number": GATEWAY_PORT}]
    assert pool["spec"]["endpointPickerRef"]["name"] == "chat-epp"
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    owner = pool["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("InferenceService", body["metadata"]["uid"])
    match = pool["spec"]["selector"]["matchLabels"]
    cluster.wait_for(lambda: len(_pods(cluster, namespace, match)) == 1, timeout=90,
                     desc="the first replica selected by the pool")

    # Scale-out onto a second GPU pool: the same pool selects every variant's pods.
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_manifests(3))
    for _ in range(2):
        reconcile()
    cluster.wait_for(lambda: len(_pods(cluster, namespace)) == 3, timeout=90,
                     desc="three replicas")
    selected = _pods(cluster, namespace, match)
    assert {p["metadata"]["name"] for p in selected} == {
        p["metadata"]["name"] for p in _pods(cluster, namespace)}
    assert len({p["metadata"]["labels"][LABEL_VARIANT] for p in selected}) == 2
    after = _pool(cluster, namespace)
    assert after is not None
    assert after["spec"] == pool["spec"]
    assert after["metadata"]["generation"] == pool["metadata"]["generation"]

    # Turned off: deleted; on again: back.
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_manifests(3, enabled=False))
    body = reconcile()
    assert conditions(body)[INFERENCE_POOL_READY]["reason"] == DISABLED
    cluster.wait_for(lambda: _pool(cluster, namespace) is None, timeout=30,
                     desc="the pool deleted")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_manifests(3))
    body = reconcile()
    assert conditions(body)[INFERENCE_POOL_READY]["reason"] == APPLIED
    assert _pool(cluster, namespace) is not None

    # The service deleted: the garbage collector takes its pool.
    cluster.kubectl("delete", "inferenceservice", "-n", namespace, "chat", "--wait=false")
    cluster.wait_for(lambda: _pool(cluster, namespace) is None, timeout=60,
                     desc="the pool garbage-collected with its service")
