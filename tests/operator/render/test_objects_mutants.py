"""Render, field by field: the exact objects for one fully specified service.

Everything here reaches the API server through server-side apply, so every field is
behaviour: a renamed volume unmounts the runtime, a changed probe threshold restarts
loading engines, a changed label orphans pods. The contract names shared with the in-pod
runtime come from ``slo_runtime.contract``; the rest is written out as the cluster sees it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest

from slo_operator.render import objects
from slo_operator.render.objects import (
    RenderInput,
    build_all,
    build_deployment,
    build_pdb,
    build_service,
    common_labels,
    engine_hash,
    host_requests,
    instance_name,
    live_limit_patch,
    owner_reference,
    selector_labels,
    service_name,
    variant_name,
    variant_selector,
)
from slo_runtime import contract as c

INP = RenderInput(
    name="llama", namespace="team-a", uid="uid-1", engine_image="vllm/vllm-openai:v0.32.0",
    runtime_image="slo-runtime:test", engine_args=("--model", "m"),
    engine_env=(("QUANT", "q"),), gpus_per_replica=2, gpu_resource="amd.com/gpu",
    gpu_product="MI300X", pool_selector={"b": "2", "a": "1"}, node_selector={"z": "1", "y": "2"},
    tolerations=({"key": "k", "operator": "Exists"},), replicas=3, batch_ceiling=96,
    tenant="gold", policy="chat", expected_compute_capability="9.4", fp8_policy="force",
    node_gpu_label="AMD-Instinct-MI300X", variant="mi300x",
)
MINIMAL = RenderInput(name="chat", namespace="ns", uid="", engine_image="img",
                      runtime_image="rt", engine_args=())

SELECTOR = {
    "app.kubernetes.io/name": "vllm",
    "app.kubernetes.io/instance": "llama",
    "inference.slo-operator.io/service": "llama",
}
LABELS = {
    **SELECTOR,
    "app.kubernetes.io/component": "inference",
    "app.kubernetes.io/managed-by": "slo-operator",
    "app.kubernetes.io/part-of": "slo-operator",
    "inference.slo-operator.io/tenant": "gold",
    "inference.slo-operator.io/policy": "chat",
    "inference.slo-operator.io/gpu-product": "MI300X",
}
OWNER = {"apiVersion": "inference.slo-operator.io/v1alpha1", "kind": "InferenceService",
         "name": "llama", "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}
DROP_ALL = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod(inp: RenderInput = INP) -> dict[str, Any]:
    spec: dict[str, Any] = build_deployment(inp)["spec"]["template"]["spec"]
    return spec


def _container(name: str, inp: RenderInput = INP) -> dict[str, Any]:
    return next(x for x in _pod(inp)["containers"] if x["name"] == name)


def test_public_names_resolve() -> None:
    assert objects.__all__ == [
        "ANNOTATION_ENGINE_HASH", "ANNOTATION_INFLIGHT_LIMIT", "GATEWAY_PORT", "LABEL_GPU",
        "LABEL_POLICY", "LABEL_SERVICE", "LABEL_TENANT", "LABEL_VARIANT", "MANAGED_BY",
        "VLLM_PORT",
    ]
    for name in objects.__all__:
        assert getattr(objects, name) == getattr(c, name)


def test_render_input_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        INP.replicas = 5  # type: ignore[misc]


def test_render_input_defaults() -> None:
    assert (MINIMAL.engine_env, MINIMAL.gpus_per_replica, MINIMAL.gpu_resource) == \
        ((), 1, "nvidia.com/gpu")
    assert (MINIMAL.gpu_product, dict(MINIMAL.pool_selector), dict(MINIMAL.node_selector)) == \
        ("", {}, {})
    assert (MINIMAL.tolerations, MINIMAL.replicas, MINIMAL.batch_ceiling) == ((), 1, 256)
    assert (MINIMAL.tenant, MINIMAL.policy) == ("", "")
    assert (MINIMAL.expected_compute_capability, MINIMAL.fp8_policy, MINIMAL.node_gpu_label) == \
        ("", "auto", "")
    assert (MINIMAL.cpu_request, MINIMAL.memory_request, MINIMAL.variant) == ("", "", "")
    # The defaults render: one NVIDIA GPU, the ceiling as the gateway's first limit.
    vllm = _container("vllm", MINIMAL)
    assert vllm["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    gw_env = {e["name"]: e["value"] for e in _container("gateway", MINIMAL)["env"]}
    assert gw_env[c.ENV_INFLIGHT_LIMIT] == "256"


@pytest.mark.parametrize(
    ("service", "variant", "want"),
    [
        ("llama", "", "llama-vllm"),
        ("llama", "mi300x", "llama-vllm-mi300x"),
        ("llama-3.1", "h100", "llama-3-1-vllm-h100-"
         + hashlib.sha256(b"llama-3.1-vllm-h100").hexdigest()[:8]),
    ],
)
def test_variant_names(service: str, variant: str, want: str) -> None:
    assert variant_name(service, variant) == want


def test_instance_and_service_names() -> None:
    assert (instance_name("llama"), service_name("llama")) == ("llama-vllm", "llama")


def test_labels() -> None:
    assert selector_labels(INP) == SELECTOR
    assert variant_selector(INP) == {**SELECTOR, "inference.slo-operator.io/variant": "mi300x"}
    assert variant_selector(replace(INP, variant="")) == SELECTOR
    assert common_labels(INP) == LABELS
    bare = replace(INP, tenant="", policy="", gpu_product="")
    assert common_labels(bare) == {
        **{k: v for k, v in LABELS.items() if k.startswith("app.")}, **SELECTOR,
        "inference.slo-operator.io/tenant": "team-a",
    }
    # Label values stand for names of any length.
    long = replace(INP, variant="v" * 70, policy="p" * 70, gpu_product="g" * 70, tenant="t" * 70)
    for value in (*common_labels(long).values(), *variant_selector(long).values()):
        assert len(value) <= 63


def test_owner_reference() -> None:
    assert owner_reference(INP) == OWNER


@pytest.mark.parametrize(
    ("gpus", "cpu", "memory", "want"),
    [
        (1, "", "", {"cpu": "4", "memory": "16Gi"}),
        (2, "", "", {"cpu": "6", "memory": "24Gi"}),
        (8, "", "", {"cpu": "18", "memory": "72Gi"}),
        (0, "", "", {"cpu": "4", "memory": "16Gi"}),
        (2, "12", "", {"cpu": "12", "memory": "24Gi"}),
        (2, "", "100Gi", {"cpu": "6", "memory": "100Gi"}),
    ],
)
def test_host_requests(gpus: int, cpu: str, memory: str, want: dict[str, str]) -> None:
    inp = replace(INP, gpus_per_replica=gpus, cpu_request=cpu, memory_request=memory)
    assert host_requests(inp) == want


def test_engine_hash_is_a_stable_digest_of_image_args_and_env() -> None:
    # A new digest restarts every replica: it must not move between releases for one input.
    payload = json.dumps({"image": "vllm/vllm-openai:v0.32.0", "args": ["--model", "m"],
                          "env": [["QUANT", "q"]]}, sort_keys=True)
    assert engine_hash(INP) == hashlib.sha256(payload.encode()).hexdigest()[:16]
    assert engine_hash(INP) == "ba6aebc8d2dd88e7"
    assert engine_hash(replace(INP, engine_env=())) != engine_hash(INP)


def test_deployment_object() -> None:
    dep = build_deployment(INP)
    pod_labels = {**LABELS, "inference.slo-operator.io/variant": "mi300x"}
    assert dep["apiVersion"] == "apps/v1"
    assert dep["kind"] == "Deployment"
    assert dep["metadata"] == {
        "name": "llama-vllm-mi300x", "namespace": "team-a", "labels": pod_labels,
        "annotations": {"inference.slo-operator.io/service-name": "llama"},
        "ownerReferences": [OWNER],
    }
    spec = dep["spec"]
    assert set(spec) == {"replicas", "selector", "strategy", "template"}
    assert spec["replicas"] == 3
    assert spec["selector"] == {"matchLabels": {**SELECTOR,
                                                "inference.slo-operator.io/variant": "mi300x"}}
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert spec["template"]["metadata"] == {
        "labels": pod_labels,
        "annotations": {
            "inference.slo-operator.io/service-name": "llama",
            c.ANNOTATION_ENGINE_HASH: "ba6aebc8d2dd88e7",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(c.GATEWAY_PORT),
            "prometheus.io/path": c.GATEWAY_METRICS_PATH,
        },
    }


def test_pod_spec_scheduling_and_security() -> None:
    pod = _pod()
    assert set(pod) == {"initContainers", "containers", "terminationGracePeriodSeconds",
                        "securityContext", "volumes", "affinity", "nodeSelector", "tolerations"}
    assert [x["name"] for x in pod["containers"]] == ["vllm", "gateway"]
    assert pod["terminationGracePeriodSeconds"] == 120
    assert pod["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "a", "operator": "In", "values": ["1"]},
            {"key": "b", "operator": "In", "values": ["2"]},
        ]}]}}}
    assert list(pod["nodeSelector"].items()) == [("y", "2"), ("z", "1")]
    # The user's tolerations first (copies), then the GPU resource's taint.
    assert pod["tolerations"] == [
        {"key": "k", "operator": "Exists"},
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert pod["tolerations"][0] is not INP.tolerations[0]


def test_pod_without_pool_or_node_selector() -> None:
    pod = _pod(replace(INP, pool_selector={}, node_selector={}, tolerations=()))
    assert "affinity" not in pod and "nodeSelector" not in pod
    assert pod["tolerations"] == [{"key": "amd.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]


def test_volumes() -> None:
    assert _pod()["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        {"name": "home", "emptyDir": {}},
        {"name": "slo-runtime", "emptyDir": {}},
        {"name": "run", "emptyDir": {}},
        {"name": c.LIMIT_VOLUME, "downwardAPI": {"items": [{
            "path": c.LIMIT_FILE_NAME,
            "fieldRef": {"fieldPath":
                         "metadata.annotations['inference.slo-operator.io/inflight-limit']"},
        }]}},
    ]


def test_vllm_container() -> None:
    vllm = _container("vllm")
    assert vllm["image"] == "vllm/vllm-openai:v0.32.0"
    assert vllm["command"] == ["python3", "-m", "slo_runtime.cli", "launch"]
    assert vllm["env"] == [
        {"name": c.ENV_ENGINE_ARGS, "value": '["--model", "m"]'},
        {"name": c.ENV_VLLM_HOST, "value": c.VLLM_HOST},
        {"name": c.ENV_VLLM_PORT, "value": str(c.VLLM_PORT)},
        {"name": c.ENV_EXPECTED_GPU_PRODUCT, "value": "AMD-Instinct-MI300X"},
        {"name": c.ENV_EXPECTED_COMPUTE_CAPABILITY, "value": "9.4"},
        {"name": c.ENV_EXPECTED_GPU_COUNT, "value": "2"},
        {"name": c.ENV_FP8_POLICY, "value": "force"},
        {"name": c.ENV_PROBE_FILE, "value": c.PROBE_FILE},
        {"name": "PYTHONPATH", "value": c.RUNTIME_MOUNT},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "HOME", "value": "/home/vllm"},
        {"name": "QUANT", "value": "q"},
    ]
    assert vllm["resources"] == {
        "limits": {"amd.com/gpu": "2"},
        "requests": {"amd.com/gpu": "2", "cpu": "6", "memory": "24Gi"},
    }
    assert vllm["securityContext"] == {**DROP_ALL, "readOnlyRootFilesystem": False}
    health = {"httpGet": {"path": "/health", "port": c.GATEWAY_PORT}}
    assert vllm["startupProbe"] == {**health, "periodSeconds": 10, "failureThreshold": 180}
    assert vllm["readinessProbe"] == {**health, "periodSeconds": 5, "failureThreshold": 3}
    assert vllm["livenessProbe"] == {
        "exec": {"command": [
            "python3", "-c",
            "import urllib.request; urllib.request.urlopen("
            f"'http://{c.VLLM_HOST}:{c.VLLM_PORT}/health', timeout=5)",
        ]},
        "timeoutSeconds": 10, "periodSeconds": 15, "failureThreshold": 4,
    }
    assert vllm["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "home", "mountPath": "/home/vllm"},
        {"name": "slo-runtime", "mountPath": c.RUNTIME_MOUNT, "readOnly": True},
        {"name": "run", "mountPath": c.RUN_DIR},
    ]
    assert set(vllm) == {"name", "image", "command", "env", "resources", "securityContext",
                         "startupProbe", "readinessProbe", "livenessProbe", "volumeMounts"}


def test_expected_gpu_product_falls_back_to_the_catalogue_key() -> None:
    env = {e["name"]: e.get("value") for e in
           _container("vllm", replace(INP, node_gpu_label=""))["env"]}
    assert env[c.ENV_EXPECTED_GPU_PRODUCT] == "MI300X"


def test_gateway_container() -> None:
    assert _container("gateway") == {
        "name": "gateway",
        "image": "slo-runtime:test",
        "command": ["slo-runtime", "gateway", "--port", str(c.GATEWAY_PORT),
                    "--upstream", f"http://{c.VLLM_HOST}:{c.VLLM_PORT}"],
        "env": [
            {"name": c.ENV_INFLIGHT_LIMIT_FILE, "value": c.LIMIT_FILE},
            {"name": c.ENV_INFLIGHT_LIMIT, "value": "96"},
            {"name": c.ENV_PROBE_FILE, "value": c.PROBE_FILE},
        ],
        "ports": [{"name": "http", "containerPort": c.GATEWAY_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
        "securityContext": {**DROP_ALL, "readOnlyRootFilesystem": True},
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "volumeMounts": [
            {"name": c.LIMIT_VOLUME, "mountPath": c.LIMIT_DIR, "readOnly": True},
            {"name": "run", "mountPath": c.RUN_DIR, "readOnly": True},
        ],
    }


def test_inject_container() -> None:
    assert _pod()["initContainers"] == [{
        "name": "slo-runtime-inject",
        "image": "slo-runtime:test",
        "command": ["sh", "-c",
                    "cp -R \"$(python3 -c 'import os, slo_runtime; "
                    "print(os.path.dirname(slo_runtime.__file__))')\" "
                    f"{c.RUNTIME_MOUNT}/"],
        "securityContext": {**DROP_ALL, "readOnlyRootFilesystem": True},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                      "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "slo-runtime", "mountPath": c.RUNTIME_MOUNT}],
    }]


def test_service_object() -> None:
    assert build_service(INP) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llama", "namespace": "team-a", "labels": LABELS,
                     "annotations": {"inference.slo-operator.io/service-name": "llama"},
                     "ownerReferences": [OWNER]},
        "spec": {
            "selector": SELECTOR,
            "ports": [{"name": "http", "port": c.GATEWAY_PORT, "targetPort": "http",
                       "protocol": "TCP"}],
        },
    }


def test_pdb_object() -> None:
    assert build_pdb(INP) == {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "llama-vllm", "namespace": "team-a", "labels": LABELS,
                     "annotations": {"inference.slo-operator.io/service-name": "llama"},
                     "ownerReferences": [OWNER]},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


def test_preview_metadata_has_no_owner() -> None:
    assert build_service(MINIMAL)["metadata"] == {
        "name": "chat", "namespace": "ns",
        "labels": {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "chat",
                   "inference.slo-operator.io/service": "chat",
                   "app.kubernetes.io/component": "inference",
                   "app.kubernetes.io/managed-by": "slo-operator",
                   "app.kubernetes.io/part-of": "slo-operator",
                   "inference.slo-operator.io/tenant": "ns"},
        "annotations": {"inference.slo-operator.io/service-name": "chat"},
    }


def test_build_all_orders_deployments_then_service_and_pdb() -> None:
    kinds = [(o["kind"], o["metadata"]["name"]) for o in build_all(INP)]
    assert kinds == [("Deployment", "llama-vllm-mi300x"), ("Service", "llama"),
                     ("PodDisruptionBudget", "llama-vllm")]
    variants = [replace(INP, variant="a"), replace(INP, variant="b", replicas=0)]
    objs = build_all(INP, variants)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("Deployment", "llama-vllm-a"), ("Deployment", "llama-vllm-b"), ("Service", "llama"),
        ("PodDisruptionBudget", "llama-vllm")]
    assert objs[1]["spec"]["replicas"] == 0
    # No variants at all: only the service-wide objects.
    assert [o["kind"] for o in build_all(INP, [])] == ["Service", "PodDisruptionBudget"]


def test_live_limit_patch() -> None:
    assert live_limit_patch(5) == {
        "metadata": {"annotations": {"inference.slo-operator.io/inflight-limit": "5"}}}
