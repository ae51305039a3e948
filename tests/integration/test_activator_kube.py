"""The activator's Routes and Waker against the real API server, endpoint controller and
KWOK pods (the operator does not run: the test creates what it would)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kubernetes.client
import pytest

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.activator.apiserver import SLICE_SELECTOR, KubeRoutes, KubeWaker
from slo_operator.activator.app import NotFound
from slo_operator.api.activation import (
    ANNOTATION_WAKE,
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    SLICE_MANAGED_BY,
    Wake,
    parse_wake,
)
from slo_operator.api.models import GROUP
from slo_operator.render.names import ANNOTATION_SERVICE_NAME
from slo_operator.render.objects import service_name
from slo_runtime.contract import GATEWAY_PORT, LABEL_MANAGED_BY, LABEL_SERVICE, MANAGED_BY
from tests.integration.operator_support import install_crds
from tests.runtime.rt_support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NAME = "chat.v2"  # a dotted name: its Service's name differs (render.objects.service_name)
SVC = service_name(NAME)
SELECTOR = {"app.kubernetes.io/name": "vllm", LABEL_SERVICE: "chat-v2"}


def _service() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SVC, "labels": {**SELECTOR, LABEL_MANAGED_BY: MANAGED_BY},
                     "annotations": {ANNOTATION_SERVICE_NAME: NAME}},
        "spec": {"selector": SELECTOR,
                 "ports": [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}]},
    }


def _pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "chat-v2-0", "labels": SELECTOR},
        "spec": {"nodeName": node, "containers": [{
            "name": "gateway", "image": "registry.k8s.io/pause:3.10",
            "ports": [{"name": "http", "containerPort": GATEWAY_PORT}]}]},
    }


def _activator_slice() -> dict[str, Any]:
    """The operator's slice routing the Service to the activator: never a Ready replica."""
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{SVC}-activator",
                     "labels": {LABEL_SERVICE_NAME: SVC, LABEL_SLICE_MANAGED_BY: SLICE_MANAGED_BY,
                                LABEL_MANAGED_BY: MANAGED_BY}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8012, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.99.99.99"], "conditions": {"ready": True}}],
    }


@pytest.fixture
async def routes(cluster: LocalCluster) -> AsyncIterator[KubeRoutes]:
    api = cluster.api_client()
    # KWOK's pod IPs reach nothing: the hook maps them to names a test can recognise
    # (a harness maps them to loopback replica servers).
    r = KubeRoutes(api, address=lambda ip, port: f"http://pod-{ip}:{port}")
    r.start(asyncio.get_running_loop())
    try:
        yield r
    finally:
        await asyncio.to_thread(r.stop)
        api.close()  # type: ignore[no-untyped-call]


async def test_routes_follow_the_services_and_their_ready_pods(
        cluster: LocalCluster, namespace: str, routes: KubeRoutes) -> None:
    key = (namespace, NAME)
    core = cluster.core
    discovery = kubernetes.client.DiscoveryV1Api(cluster.api)
    core.create_namespaced_service(namespace, _service())
    discovery.create_namespaced_endpoint_slice(namespace, _activator_slice())
    await wait_until(lambda: routes.synced and routes.by_service(namespace, SVC) == key,
                     timeout=30)
    cluster_ip = core.read_namespaced_service(SVC, namespace).spec.cluster_ip
    assert routes.by_cluster_ip(cluster_ip) == key
    assert routes.by_name(namespace, NAME) == key
    assert routes.endpoints(key) == ()  # the activator's own slice is not a replica

    core.create_namespaced_pod(namespace, _pod(cluster.node_names[0]))
    await asyncio.wait_for(routes.settled(key), timeout=90)
    pod = core.read_namespaced_pod("chat-v2-0", namespace)
    assert routes.endpoints(key) == (f"http://pod-{pod.status.pod_ip}:{GATEWAY_PORT}",)

    # The endpoint controller copies the Service's labels onto its slices: the label
    # selector the watch uses picks exactly them, and not the activator's.
    picked = discovery.list_namespaced_endpoint_slice(namespace,
                                                      label_selector=SLICE_SELECTOR).items
    assert [s.metadata.labels[LABEL_SERVICE_NAME] for s in picked] == [SVC]
    assert picked[0].metadata.labels[LABEL_MANAGED_BY] == MANAGED_BY

    core.delete_namespaced_pod("chat-v2-0", namespace, grace_period_seconds=0)
    await wait_until(lambda: routes.endpoints(key) == (), timeout=60)
    core.delete_namespaced_service(SVC, namespace)
    await asyncio.wait_for(routes.settled(key), timeout=60)  # gone settles too
    assert routes.by_service(namespace, SVC) is None
    assert routes.by_cluster_ip(cluster_ip) is None


async def test_waker_writes_the_wake_annotation_and_reports_a_deleted_service(
        cluster: LocalCluster, namespace: str) -> None:
    install_crds(cluster)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: {NAME}}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
""")
    api = cluster.api_client()
    try:
        waker = KubeWaker(api)
        wake = Wake(requested_at=1_700_000_000.25, held=3, served_at=1_700_000_042.5,
                    waited_s=42.25, by="activator-0")
        await waker.wake(namespace, NAME, wake)
        body = cluster.kubectl_json("get", "infsvc", "-n", namespace, NAME)
        assert parse_wake(body["metadata"]["annotations"][ANNOTATION_WAKE]) == wake
        assert body["spec"]["model"]["name"] == "org/chat"  # a merge patch: nothing else

        cluster.kubectl("delete", "infsvc", "-n", namespace, NAME, "--wait=true")
        with pytest.raises(NotFound):
            await waker.wake(namespace, NAME, wake)
    finally:
        api.close()  # type: ignore[no-untyped-call]
