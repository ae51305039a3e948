"""Render: the Kubernetes objects for one service, field by field, and the pod's contract
with the in-pod runtime.

Everything here reaches the API server through server-side apply, so every field is
behaviour: a renamed volume unmounts the runtime, a changed probe threshold restarts
loading engines, a changed label orphans pods. The contract names shared with the in-pod
runtime come from ``slo_runtime.contract``; the rest is written out as the cluster sees it.
Render has no messages of its own: every value here is a field, asserted exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slo_operator.api.models import (
    OPERATOR_ENV_NAMES,
    OPERATOR_ENV_PREFIX,
    InferenceServiceSpec,
    SLOPolicySpec,
)
from slo_operator.reconcile.desired import ServicePlan, plan_service, pool_from_product
from slo_operator.render.names import child_name
from slo_operator.render.objects import (
    PRE_STOP_SLEEP_S,
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
    rollout_surge,
    selector_labels,
    service_name,
    variant_name,
    variant_selector,
)
from slo_runtime import contract as c
from slo_runtime.launch import read_env, run_launch
from slo_runtime.probe import GpuInfo

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


def test_render_input_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        INP.replicas = 5  # type: ignore[misc]


def test_minimal_input_renders_one_nvidia_gpu_and_the_default_ceiling() -> None:
    vllm = _container("vllm", MINIMAL)
    assert vllm["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    gw_env = {e["name"]: e["value"] for e in _container("gateway", MINIMAL)["env"]}
    assert gw_env[c.ENV_INFLIGHT_LIMIT] == "256"


@pytest.mark.parametrize(
    ("service", "variant", "want"),
    [
        pytest.param("llama", "", "llama-vllm", id="no-variant-is-the-instance"),
        pytest.param("llama", "mi300x", "llama-vllm-mi300x", id="variant-suffix"),
        pytest.param("llama-3.1", "h100", "llama-3-1-vllm-h100-"
                     + hashlib.sha256(b"llama-3.1-vllm-h100").hexdigest()[:8],
                     id="dotted-service-hashed"),
    ],
)
def test_variant_deployment_names(service: str, variant: str, want: str) -> None:
    assert variant_name(service, variant) == want


@pytest.mark.parametrize(
    ("service", "want_service", "want_instance"),
    [
        pytest.param("llama", "llama", "llama-vllm", id="plain-name-unchanged"),
        pytest.param("llama-8b", "llama-8b", "llama-8b-vllm", id="dashes-unchanged"),
        pytest.param("llama-3.1-8b", child_name("llama-3.1-8b"),
                     child_name("llama-3.1-8b", "vllm"), id="dots-replaced"),
        pytest.param("8b-chat", child_name("8b-chat"), child_name("8b-chat", "vllm"),
                     id="leading-digit"),
        pytest.param("a" * 253, child_name("a" * 253), child_name("a" * 253, "vllm"),
                     id="longest-name"),
    ],
)
def test_service_and_instance_names_are_child_names(service: str, want_service: str,
                                                    want_instance: str) -> None:
    # The Service is named for the service; the Deployment and PDB add "-vllm".
    assert service_name(service) == want_service
    assert instance_name(service) == want_instance


def test_labels_on_objects_and_selectors() -> None:
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


def test_owner_reference_to_the_inference_service() -> None:
    assert owner_reference(INP) == OWNER


@pytest.mark.parametrize(
    ("gpus", "cpu", "memory", "want"),
    [
        pytest.param(1, "", "", {"cpu": "4", "memory": "16Gi"}, id="one-gpu"),
        pytest.param(2, "", "", {"cpu": "6", "memory": "24Gi"}, id="two-gpus"),
        pytest.param(8, "", "", {"cpu": "18", "memory": "72Gi"}, id="eight-gpus"),
        pytest.param(0, "", "", {"cpu": "4", "memory": "16Gi"}, id="no-gpu-sized-as-one"),
        pytest.param(2, "12", "", {"cpu": "12", "memory": "24Gi"}, id="cpu-given"),
        pytest.param(2, "", "100Gi", {"cpu": "6", "memory": "100Gi"}, id="memory-given"),
    ],
)
def test_host_requests_sized_per_gpu_unless_given(gpus: int, cpu: str, memory: str,
                                                  want: dict[str, str]) -> None:
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
                                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}
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
                         "startupProbe", "readinessProbe", "livenessProbe", "volumeMounts",
                         "lifecycle"}


def test_both_containers_serve_on_while_a_deleted_pod_leaves_the_endpoints() -> None:
    """A preStop sleep, within the grace period, before either container's SIGTERM."""
    for name in ("vllm", "gateway"):
        assert _container(name)["lifecycle"] == {
            "preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}}
    assert 0 < PRE_STOP_SLEEP_S < _pod()["terminationGracePeriodSeconds"] / 10


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
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}},
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


@pytest.mark.parametrize(
    ("change", "want_resource", "want_gpus"),
    [
        pytest.param({"gpu_resource": "nvidia.com/gpu", "gpus_per_replica": 1},
                     "nvidia.com/gpu", "1", id="one-nvidia-gpu"),
        pytest.param({"gpu_resource": "nvidia.com/gpu", "gpus_per_replica": 4},
                     "nvidia.com/gpu", "4", id="tensor-parallel-4"),
        pytest.param({}, "amd.com/gpu", "2", id="amd-resource-name"),
        pytest.param({"gpu_resource": "habana.ai/gaudi", "gpus_per_replica": 1},
                     "habana.ai/gaudi", "1", id="gaudi"),
    ],
)
def test_gpu_resources_are_limited_and_requested(change: dict[str, Any], want_resource: str,
                                                 want_gpus: str) -> None:
    inp = replace(INP, **change)
    vllm = _container("vllm", inp)
    assert vllm["resources"]["limits"] == {want_resource: want_gpus}
    requests = vllm["resources"]["requests"]
    assert requests[want_resource] == want_gpus
    # Host CPU and memory are requested too (quota-enforcing namespaces demand them).
    assert {k: v for k, v in requests.items() if k != want_resource} == host_requests(inp)
    # GPU nodes are commonly tainted for their resource.
    assert _pod(inp)["tolerations"][-1] == {"key": want_resource, "operator": "Exists",
                                            "effect": "NoSchedule"}


def test_preview_without_uid_owns_nothing() -> None:
    # An all-zero or empty UID would let the garbage collector delete applied previews.
    for obj in build_all(replace(INP, uid="")):
        assert "ownerReferences" not in obj["metadata"]


def test_service_pdb_and_deployment_select_the_pods() -> None:
    # A selector must be a subset of the pod labels or the API server rejects it.
    deployment = build_deployment(INP)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels
    assert build_service(INP)["spec"]["selector"].items() <= pod_labels
    assert build_pdb(INP)["spec"]["selector"]["matchLabels"].items() <= pod_labels


@pytest.mark.parametrize(
    ("change", "want_same"),
    [
        pytest.param({"replicas": 7}, True, id="replicas-do-not-restart"),
        pytest.param({"batch_ceiling": 8}, True, id="batch-ceiling-does-not-restart"),
        pytest.param({"engine_args": ("--model", "m", "--max-num-seqs", "32")}, False,
                     id="engine-args-change-hash"),
        pytest.param({"engine_image": "vllm/vllm-openai:v0.33.0"}, False, id="image-changes-hash"),
        pytest.param({"engine_env": ()}, False, id="engine-env-changes-hash"),
    ],
)
def test_engine_hash_tracks_only_restart_fields(change: dict[str, Any], want_same: bool) -> None:
    assert (engine_hash(INP) == engine_hash(replace(INP, **change))) is want_same


def _render_with_limit(mode: str, limit: int) -> RenderInput:
    """The render input of a default service whose controller state holds ``limit``."""
    policy = SLOPolicySpec.model_validate({"batching": {"mode": mode, "minBatch": 8,
                                                        "maxBatch": 128}})
    spec = InferenceServiceSpec.model_validate(
        {"model": {"name": "org/m", "sizeBillions": 8, "maxModelLen": 4096}})
    pool = pool_from_product("H100")
    assert pool is not None
    result = plan_service(name="svc", namespace="ns", uid="u", spec=spec, policy=policy,
                          policy_name="", pools=[pool], replicas=1, restart_limit=limit)
    assert isinstance(result, ServicePlan), result
    return result.render


def test_pod_template_is_the_same_whatever_the_live_limit() -> None:
    """The live limit is not a render input at all: plans that differ only in the
    controller's live limit render identical pod templates (no rollout)."""
    low, high = _render_with_limit("live", 16), _render_with_limit("live", 200)
    assert build_deployment(low)["spec"]["template"] == build_deployment(high)["spec"]["template"]
    # Under batching.mode restart the limit is baked into --max-num-seqs: the template moves.
    r_low, r_high = _render_with_limit("restart", 16), _render_with_limit("restart", 200)
    assert (build_deployment(r_low)["spec"]["template"]
            != build_deployment(r_high)["spec"]["template"])


def test_user_env_cannot_collide_with_the_operators_env() -> None:
    """Every env name the operator sets is one the API refuses from users (duplicate keys
    make server-side apply fail)."""
    dep = build_deployment(replace(INP, engine_env=(("QUANT_CONFIG", "/q.json"),)))
    for container in dep["spec"]["template"]["spec"]["containers"]:
        for e in container.get("env", []):
            assert e["name"].startswith(OPERATOR_ENV_PREFIX) or e["name"] in OPERATOR_ENV_NAMES


def test_every_container_meets_pod_security_restricted() -> None:
    pod = _pod()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"] + pod["initContainers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
    assert all(set(v) & {"emptyDir", "downwardAPI"} for v in pod["volumes"])


# ------------------------------------------------------------------ the runtime contract
# The pod the operator renders is one the in-pod runtime can start: env names, args, ports.
# Both packages are used on purpose: this is the contract between them.

GPUS = {
    "H100": GpuInfo("nvidia", "NVIDIA H100 80GB HBM3", "9.0", 81559, 8, "test"),
    "A100": GpuInfo("nvidia", "NVIDIA A100-SXM4-40GB", "8.0", 40960, 8, "test"),
    "T4": GpuInfo("nvidia", "Tesla T4", "7.5", 15360, 8, "test"),
}


def _planned_pod(product: str, precision: str = "auto") -> dict[str, Any]:
    spec = InferenceServiceSpec.model_validate({
        "model": {"name": "org/llama-8b", "sizeBillions": 8, "maxModelLen": 4096},
        "hardware": {"gpuProducts": [product]}, "engine": {"precision": precision}})
    pool = pool_from_product(product)
    assert pool is not None
    plan = plan_service(name="svc", namespace="ns", uid="u", spec=spec, policy=SLOPolicySpec(),
                        policy_name="", pools=[pool], replicas=1)
    assert isinstance(plan, ServicePlan)
    pod: dict[str, Any] = build_deployment(plan.render)["spec"]["template"]["spec"]
    return pod


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("product", ["H100", "A100", "T4"])
def test_launcher_starts_rendered_pod_without_fallbacks_on_matching_gpu(
    product: str, tmp_path: Path
) -> None:
    vllm = _planned_pod(product)["containers"][0]
    env = {**_env(vllm), "SLO_PROBE_FILE": str(tmp_path / "probe.json")}
    execs: list[list[str]] = []
    plan = run_launch(env, gpu=GPUS[product], exec_fn=lambda f, argv: execs.append(argv))
    assert execs, "launcher did not exec vLLM"
    assert plan.changes == [], f"launcher had to change settings: {plan.changes}"
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["matches"] is True, probe  # the label the operator passed matches the GPU
    cfg = read_env(_env(vllm))
    # Everything the operator chose reaches vLLM; only host/port are the launcher's.
    argv = execs[0]
    for flag in ("--dtype", "--tensor-parallel-size", "--max-num-seqs"):
        i = cfg["engine_args"].index(flag)
        assert argv[argv.index(flag) + 1] == cfg["engine_args"][i + 1]


def test_fp8_plan_falls_back_on_a_gpu_without_fp8(tmp_path: Path) -> None:
    vllm = _planned_pod("H100")["containers"][0]
    env = {**_env(vllm), "SLO_PROBE_FILE": str(tmp_path / "probe.json")}
    execs: list[list[str]] = []
    # The labels promised an H100, but the pod landed on an A100 (mislabelled node).
    plan = run_launch(env, gpu=GPUS["A100"], exec_fn=lambda f, argv: execs.append(argv))
    assert "--quantization" not in execs[0]
    assert plan.changes, "fallback must be reported"
    assert json.loads((tmp_path / "probe.json").read_text())["matches"] is False


def test_explicit_fp8_request_is_forced_in_the_launcher() -> None:
    assert _env(_planned_pod("H100", "fp8")["containers"][0])[c.ENV_FP8_POLICY] == "force"
    assert _env(_planned_pod("H100")["containers"][0])[c.ENV_FP8_POLICY] == "auto"


def test_probes_and_launcher_listen_where_the_gateway_forwards() -> None:
    vllm, gateway = _planned_pod("H100")["containers"]
    cfg = read_env(_env(vllm))
    assert f"http://127.0.0.1:{cfg['port']}" in gateway["command"]
    assert str(c.GATEWAY_PORT) in gateway["command"]
    assert vllm["readinessProbe"]["httpGet"]["port"] == c.GATEWAY_PORT


@pytest.mark.parametrize(("replicas", "surge"), [(0, 1), (1, 1), (4, 1), (5, 2), (12, 3), (13, 4)])
def test_a_rollout_surges_a_quarter_of_the_replicas_rounded_up(replicas: int, surge: int) -> None:
    # As the Deployment controller reads the rendered maxSurge percentage (rounded up).
    assert rollout_surge(replicas) == surge
