"""The live batch limit moves on the running pods only: no rollout, no restart."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.integration.operator_support import install_crds
from tests.support.cluster import LocalCluster

from slo_operator.adapters.kube import Kube
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_operator.reconcile.status import SLOUpdate
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT

pytestmark = pytest.mark.integration
GROUP = "inference.slo-operator.io"
APPLIED = AppliedCache()  # one operator's memory of what it applied


def _pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kubectl_json(
        "get", "pods", "-n", ns, "-l", f"{GROUP}/service=chat")["items"]
    return items


def test_live_limit_change_patches_pods_only(cluster: LocalCluster, namespace: str) -> None:
    install_crds(cluster)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: SLOPolicy
metadata: {{name: gold}}
spec:
  scaling: {{minReplicas: 2, maxReplicas: 2}}
  batching: {{mode: live, minBatch: 8, maxBatch: 64}}
---
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
  sloPolicyRef: {{name: gold}}
""")
    api = cluster.api_client()
    kube = Kube(api)

    def reconcile() -> None:
        snap = kube.read_snapshot()
        reconcile_service_sync(kube, snap.services[(namespace, "chat")], snap,
                               datetime.now(UTC), Settings(), APPLIED)

    reconcile()
    cluster.wait_for(lambda: [p for p in _pods(cluster, namespace)
                              if p["status"].get("phase") == "Running"] and
                     len(_pods(cluster, namespace)) == 2,
                     timeout=90, desc="two pods running")
    reconcile()  # sets the starting limit on the new pods: the ceiling
    before_pods = _pods(cluster, namespace)
    assert {p["metadata"]["annotations"][ANNOTATION_INFLIGHT_LIMIT] for p in before_pods} == {
        "64"}
    before_dep = cluster.kubectl_json("get", "deploy", "-n", namespace, "chat-vllm")

    patched = set_live_limit(kube, namespace, 24)

    after_pods = _pods(cluster, namespace)
    after_dep = cluster.kubectl_json("get", "deploy", "-n", namespace, "chat-vllm")
    assert sorted(patched) == sorted(p["metadata"]["name"] for p in before_pods)
    assert {p["metadata"]["annotations"][ANNOTATION_INFLIGHT_LIMIT] for p in after_pods} == {
        "24"}
    assert ({p["metadata"]["uid"] for p in after_pods}
            == {p["metadata"]["uid"] for p in before_pods})
    assert after_dep["spec"]["template"] == before_dep["spec"]["template"]
    assert after_dep["metadata"]["generation"] == before_dep["metadata"]["generation"]
    # A second call with the same limit writes nothing.
    assert set_live_limit(kube, namespace, 24) == []
    api.close()  # type: ignore[no-untyped-call]


def set_live_limit(kube: Kube, namespace: str, limit: int) -> list[str]:
    """What the SLO loop's pass does with a decided limit: one reconcile carrying the
    decision (``SLOUpdate``); returns the pods it patched."""
    snap = kube.read_snapshot()
    body = snap.services[(namespace, "chat")]
    update = SLOUpdate(replicas=body["status"]["desiredReplicas"], batch_limit=limit,
                       reason="LimitLowered", message="test")
    out = reconcile_service_sync(kube, body, snap, datetime.now(UTC), Settings(),
                                 APPLIED, update)
    assert not [a for a in out.applied if not a.startswith("Pod/")], out.applied
    return [a.split("/", 1)[1].split(" ")[0] for a in out.applied]
