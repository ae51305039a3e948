"""The local control plane behaves like a real cluster with GPU nodes."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
from kubernetes.client.exceptions import ApiException

from slo_devtools.devenv.control_plane import ClusterError, LocalCluster

pytestmark = pytest.mark.integration

H100 = "NVIDIA-H100-80GB-HBM3"


def gpu_deployment(
    name: str, *, resource: str, count: int, label: str, values: list[str], replicas: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": label, "operator": "In", "values": values}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [
                        {
                            "name": "server",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {resource: str(count)},
                                "limits": {resource: str(count)},
                            },
                        }
                    ],
                },
            },
        },
    }


def pods_of(core: kubernetes.client.CoreV1Api, ns: str, app: str) -> list[Any]:
    return list(core.list_namespaced_pod(ns, label_selector=f"app={app}").items)


def is_ready(pod: Any) -> bool:
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


def test_version_is_the_built_release(cluster: LocalCluster) -> None:
    v = cluster.version()
    assert v["gitVersion"] == cluster.binaries.kube_version
    # 1.37 is built by default; 1.36 only when the 1.37 build fails (see docs/dev-cluster.md).
    assert v["gitVersion"].startswith(("v1.37.", "v1.36.")), v
    assert v["major"] == "1"
    assert v["minor"] == v["gitVersion"].split(".")[1]


def test_fake_gpu_nodes_are_ready_with_gpus(
    cluster: LocalCluster, kube_api: kubernetes.client.ApiClient
) -> None:
    nodes = {
        n.metadata.name: n
        for n in kubernetes.client.CoreV1Api(kube_api).list_node(label_selector="type=kwok").items
    }
    assert set(cluster.node_names) <= set(nodes)
    products: Counter[str] = Counter()
    for name in cluster.node_names:
        node = nodes[name]
        labels = node.metadata.labels
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", name
        if "nvidia.com/gpu.product" in labels:
            products[labels["nvidia.com/gpu.product"]] += 1
            assert node.status.allocatable["nvidia.com/gpu"] == labels["nvidia.com/gpu.count"]
            assert int(labels["nvidia.com/gpu.compute.major"]) >= 8
            assert int(labels["nvidia.com/gpu.memory"]) > 20_000
        else:
            products[labels["amd.com/gpu.product-name"]] += 1
            assert node.status.allocatable["amd.com/gpu"] == "8"
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert products == {
        H100: 2,
        "NVIDIA-A100-SXM4-80GB": 2,
        "NVIDIA-L4": 1,
        "AMD_Instinct_MI300X_OAM": 1,
    }


@pytest.mark.parametrize(
    ("resource", "label", "value"),
    [
        ("nvidia.com/gpu", "nvidia.com/gpu.product", H100),
        ("amd.com/gpu", "amd.com/gpu.product-name", "AMD_Instinct_MI300X_OAM"),
    ],
)
def test_gpu_deployment_runs_on_matching_node(
    cluster: LocalCluster,
    kube_api: kubernetes.client.ApiClient,
    namespace: str,
    resource: str,
    label: str,
    value: str,
) -> None:
    apps = kubernetes.client.AppsV1Api(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    apps.create_namespaced_deployment(
        namespace, gpu_deployment("srv", resource=resource, count=8, label=label, values=[value])
    )
    pods = cluster.wait_for(
        lambda: [p for p in pods_of(core, namespace, "srv") if is_ready(p)],
        timeout=60,
        desc="GPU pod Running and Ready",
    )
    node = core.read_node(pods[0].spec.node_name)
    assert node.metadata.labels[label] == value
    assert pods[0].status.pod_ip
    cluster.wait_for(
        lambda: apps.read_namespaced_deployment("srv", namespace).status.available_replicas == 1,
        timeout=60,
        desc="deployment available",
    )


def test_pod_stays_pending_when_gpus_are_taken(
    cluster: LocalCluster, kube_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    # The fleet has a single 8 x L4 node: the first pod takes all of it.
    spec = {"resource": "nvidia.com/gpu", "count": 8, "label": "nvidia.com/gpu.product"}
    apps.create_namespaced_deployment(
        namespace, gpu_deployment("first", values=["NVIDIA-L4"], **spec)
    )
    cluster.wait_for(
        lambda: any(is_ready(p) for p in pods_of(core, namespace, "first")),
        timeout=60,
        desc="first L4 pod Running",
    )
    apps.create_namespaced_deployment(
        namespace, gpu_deployment("second", values=["NVIDIA-L4"], **spec)
    )

    def unschedulable() -> Any:
        for p in pods_of(core, namespace, "second"):
            for c in p.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    return p, c
        return None

    pod, cond = cluster.wait_for(unschedulable, timeout=60, desc="second pod Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cond.message
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    events = cluster.wait_for(
        lambda: [
            e
            for e in core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
            ).items
            if e.reason == "FailedScheduling"
        ],
        timeout=60,
        desc="FailedScheduling event",
    )
    assert "Insufficient nvidia.com/gpu" in events[0].message


def test_deleting_deployment_garbage_collects_replicaset_and_pods(
    cluster: LocalCluster, kube_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    apps.create_namespaced_deployment(
        namespace,
        gpu_deployment(
            "gc",
            resource="nvidia.com/gpu",
            count=1,
            label="nvidia.com/gpu.product",
            values=["NVIDIA-A100-SXM4-80GB"],
            replicas=2,
        ),
    )
    cluster.wait_for(
        lambda: sum(is_ready(p) for p in pods_of(core, namespace, "gc")) == 2,
        timeout=60,
        desc="2 pods Running",
    )
    rs = apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items
    assert len(rs) == 1
    assert rs[0].metadata.owner_references[0].kind == "Deployment"

    # Background propagation: the API server deletes only the Deployment; the controller
    # manager's garbage collector must remove what it owned.
    apps.delete_namespaced_deployment(
        "gc", namespace, body=kubernetes.client.V1DeleteOptions(propagation_policy="Background")
    )
    cluster.wait_for(
        lambda: not apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items,
        timeout=60,
        desc="ReplicaSet garbage-collected",
    )
    cluster.wait_for(
        lambda: not pods_of(core, namespace, "gc"), timeout=60, desc="pods garbage-collected"
    )


def test_new_namespace_gets_default_service_account(
    cluster: LocalCluster, kube_api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube_api)

    def default_sa() -> Any:
        try:
            return core.read_namespaced_service_account("default", namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    sa = cluster.wait_for(default_sa, timeout=60, desc="default ServiceAccount")
    assert sa.metadata.namespace == namespace
    root_ca = cluster.wait_for(
        lambda: (
            core.list_namespaced_config_map(
                namespace, field_selector="metadata.name=kube-root-ca.crt"
            ).items
        ),
        timeout=60,
        desc="kube-root-ca.crt ConfigMap",
    )
    assert root_ca[0].data["ca.crt"] == cluster.ca_cert.read_text()


def test_rbac_is_enforced_for_service_accounts(cluster: LocalCluster, namespace: str) -> None:
    kubeconfig = cluster.sa_kubeconfig(namespace, "no-rights")
    denied = cluster.kubectl("get", "pods", "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert f"system:serviceaccount:{namespace}:no-rights" in denied.stderr

    with pytest.raises(ApiException) as err:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        try:
            kubernetes.client.CoreV1Api(api).list_namespaced_pod(namespace)
        finally:
            api.close()
    assert err.value.status == 403

    # The same token works once RBAC allows it: the 403 was authorization, not a bad token.
    cluster.kubectl(
        "create",
        "rolebinding",
        "view",
        "--clusterrole=view",
        f"--serviceaccount={namespace}:no-rights",
        "-n",
        namespace,
    )
    allowed = cluster.wait_for(
        lambda: (
            cluster.kubectl(
                "get", "pods", "-n", namespace, "-o", "name", kubeconfig=kubeconfig, check=False
            ).returncode
            == 0
        ),
        timeout=30,
        desc="view binding takes effect",
    )
    assert allowed
    with pytest.raises(ClusterError, match="forbidden"):
        cluster.kubectl("get", "secrets", "-n", namespace, kubeconfig=kubeconfig)


def test_spawned_helper_logs_to_cluster_logs_and_stops(cluster: LocalCluster) -> None:
    assert cluster.binaries.kubectl is not None
    watcher = cluster.spawn(
        "node-watcher",
        [str(cluster.binaries.kubectl), "get", "nodes", "--watch", "-o", "name"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )
    try:
        cluster.wait_for(
            lambda: "node/kwok-mi300x-0" in watcher.log.read_text(),
            timeout=30,
            desc="watcher output",
        )
        assert watcher.log.parent == cluster.logs_dir
        assert watcher.alive()
    finally:
        watcher.stop()
    assert not watcher.alive()
