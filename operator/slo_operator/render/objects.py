"""Desired Kubernetes objects for one InferenceService, as plain dicts.

Pure functions: everything they need arrives in :class:`RenderInput`; nothing here reads
the cluster or the clock. The adapter applies the result with server-side apply under one
field manager, so a field dropped here is dropped from the cluster on the next apply.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slo_operator.api.activation import (
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    SERVICE_PORT_NAME,
    SLICE_MANAGED_BY,
    ActivatorEndpoints,
)
from slo_operator.api.models import API_VERSION
from slo_operator.render.names import (
    ANNOTATION_SERVICE_NAME,
    child_name,
    label_value,
    service_label,
)
from slo_runtime.contract import (
    ANNOTATION_ENGINE_HASH,
    ANNOTATION_INFLIGHT_LIMIT,
    ENV_ENGINE_ARGS,
    ENV_EXPECTED_COMPUTE_CAPABILITY,
    ENV_EXPECTED_GPU_COUNT,
    ENV_EXPECTED_GPU_PRODUCT,
    ENV_FP8_POLICY,
    ENV_INFLIGHT_LIMIT,
    ENV_INFLIGHT_LIMIT_FILE,
    ENV_PROBE_FILE,
    ENV_VLLM_HOST,
    ENV_VLLM_PORT,
    GATEWAY_METRICS_PATH,
    GATEWAY_PORT,
    HEALTH_PATH,
    LABEL_GPU,
    LABEL_MANAGED_BY,
    LABEL_POLICY,
    LABEL_SERVICE,
    LABEL_TENANT,
    LABEL_VARIANT,
    LIMIT_DIR,
    LIMIT_FILE,
    LIMIT_FILE_NAME,
    LIMIT_VOLUME,
    MANAGED_BY,
    PROBE_FILE,
    RUN_DIR,
    RUNTIME_MOUNT,
    VLLM_HOST,
    VLLM_PORT,
)

# Ports, names, paths and env variables are the operator<->runtime contract; they live
# once, in slo_runtime.contract. The gateway is what clients, probes and Prometheus reach;
# vLLM listens behind it on loopback only (docs/runtime.md).
__all__ = [
    "ANNOTATION_ENGINE_HASH",
    "ANNOTATION_INFLIGHT_LIMIT",
    "GATEWAY_PORT",
    "LABEL_GPU",
    "LABEL_POLICY",
    "LABEL_SERVICE",
    "LABEL_TENANT",
    "LABEL_VARIANT",
    "MANAGED_BY",
    "VLLM_PORT",
]


@dataclass(frozen=True)
class RenderInput:
    """Everything render needs about one service, already decided elsewhere."""

    name: str
    namespace: str
    uid: str
    engine_image: str
    runtime_image: str
    engine_args: Sequence[str]
    engine_env: Sequence[tuple[str, str]] = ()
    gpus_per_replica: int = 1
    gpu_resource: str = "nvidia.com/gpu"
    gpu_product: str = ""
    pool_selector: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    replicas: int = 1
    # The ceiling pinned in --max-num-seqs: the gateway's limit until the operator patches
    # the pod's live-limit annotation. Never the live limit itself, which moves on the
    # running pods only (a template change would restart every replica).
    batch_ceiling: int = 256
    tenant: str = ""
    policy: str = ""
    expected_compute_capability: str = ""
    fp8_policy: str = "auto"
    # The node's own product label value (GFD / AMD labeller), which the in-pod probe
    # compares with what the GPU reports; falls back to the catalogue key.
    node_gpu_label: str = ""
    # Host CPU and memory the vLLM container requests; empty: sized from the GPU count.
    cpu_request: str = ""
    memory_request: str = ""
    # The GPU pool's variant id: one Deployment per pool the service runs on. Empty: the
    # service's single Deployment without a variant (previews of older releases).
    variant: str = ""


def instance_name(service: str) -> str:
    """Name of the service's Deployment and PodDisruptionBudget (a DNS label)."""
    # "-vllm" keeps the Deployment name distinct from the InferenceService in kubectl output.
    return child_name(service, "vllm")


def service_name(service: str) -> str:
    """Name of the service's Kubernetes Service (a DNS-1035 label: no dots, <= 63)."""
    return child_name(service)


def variant_name(service: str, variant: str) -> str:
    """Name of the Deployment of the service's variant on one GPU pool (a DNS label)."""
    return child_name(service, f"vllm-{variant}") if variant else instance_name(service)


def _instance_name(inp: RenderInput) -> str:
    return instance_name(inp.name)


def selector_labels(inp: RenderInput) -> dict[str, str]:
    """Labels that select all of the service's pods, every variant (Service, PDB)."""
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": service_label(inp.name),
        LABEL_SERVICE: service_label(inp.name),
    }


def variant_selector(inp: RenderInput) -> dict[str, str]:
    """Labels that select one variant's pods (its Deployment): variants never overlap."""
    labels = selector_labels(inp)
    if inp.variant:
        labels[LABEL_VARIANT] = label_value(inp.variant)
    return labels


def common_labels(inp: RenderInput) -> dict[str, str]:
    """Labels on every object and pod of the service: selector, tenant, policy, GPU."""
    labels = {
        **selector_labels(inp),
        "app.kubernetes.io/component": "inference",
        LABEL_MANAGED_BY: MANAGED_BY,
        "app.kubernetes.io/part-of": "slo-operator",
        LABEL_TENANT: label_value(inp.tenant or inp.namespace),
    }
    if inp.policy:
        labels[LABEL_POLICY] = label_value(inp.policy)
    if inp.gpu_product:
        labels[LABEL_GPU] = label_value(inp.gpu_product)
    return labels


def owner_reference(inp: RenderInput) -> dict[str, Any]:
    """The controller reference to the InferenceService (garbage collection)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "name": inp.name,
        "uid": inp.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(inp: RenderInput, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": inp.namespace,
        "labels": common_labels(inp),
        "annotations": {ANNOTATION_SERVICE_NAME: inp.name},
    }
    # Without the owner's UID (a preview: `slo-operator render`) no owner reference is
    # written: one with a made-up UID makes the garbage collector delete the object.
    if inp.uid:
        meta["ownerReferences"] = [owner_reference(inp)]
    return meta


def _affinity(inp: RenderInput) -> dict[str, Any] | None:
    if not inp.pool_selector:
        return None
    expressions = [
        {"key": k, "operator": "In", "values": [v]} for k, v in sorted(inp.pool_selector.items())
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def engine_hash(inp: RenderInput) -> str:
    """Stable digest of what needs a restart to change, shown on the pod template."""
    payload = json.dumps(
        {"image": inp.engine_image, "args": list(inp.engine_args), "env": list(inp.engine_env)},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# PodSecurity "restricted" (kubernetes.io/docs/concepts/security/pod-security-standards):
# non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp.
# vLLM's image runs as root by default but needs no root: GPUs come through the device
# plugin's device nodes and it writes only to HOME (caches), /dev/shm and its sockets.
# docs/bad-input.md says what this rules out (root-owned model paths, hostPath volumes).
RUN_AS_USER = 1000
HOME_DIR = "/home/vllm"

# A deleted pod leaves the Service's endpoints while its containers get SIGTERM, and the
# two race: a proxy, a gateway or an endpoint picker that read the endpoints a moment
# before still sends it requests, which a server already stopping refuses. Every scale-in
# and every rolling update (a chunk-budget move) deletes pods, so both containers sleep
# this long in a preStop hook (Kubernetes' own sleep action, no shell needed) before the
# SIGTERM: endpoint updates reach kube-proxy and watchers within a second or two. The
# grace period (120 s) counts it, so in-flight answers keep 115 s to finish.
PRE_STOP_SLEEP_S = 5

# A rolling update of a model server (an engine argument changed: the ITL lever's chunk
# budget, the precision, the batch ceiling in ``mode: restart``) starts up to this share of
# the replicas as cold successors at once, none taken away before its successor is Ready.
# Each old pod overlaps its successor's cold start whatever the share, so the GPU-seconds
# are those of one replica at a time; a quarter ends a 12-replica roll in 4 cold starts
# instead of 12, while the old budget keeps missing. Surge pods that find no free GPU wait
# Pending; each old pod that retires frees a GPU for the next, so a roll with one free GPU
# goes one at a time, and one with none waits, as with a surge of one.
ROLLOUT_SURGE_PERCENT = 25


def rollout_surge(replicas: int) -> int:
    """Successors a rolling update of ``replicas`` starts at once: ``maxSurge`` as the
    Deployment controller reads the percentage (rounded up, at least one)."""
    return max(1, -(-max(0, replicas) * ROLLOUT_SURGE_PERCENT // 100))


def _pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container_security(read_only_root: bool) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
    }


def host_requests(inp: RenderInput) -> dict[str, str]:
    """CPU and memory for the vLLM container: the given ones, else sized per GPU.

    vLLM runs one worker process per GPU beside the API server and the engine core, each
    busy on a core (docs: "at least 2 + N CPU cores for N GPUs"); host memory holds the
    process heaps and the pinned staging buffers. No CPU limit: throttling an engine loop
    shows up directly as inter-token latency.
    """
    gpus = max(inp.gpus_per_replica, 1)
    return {
        "cpu": inp.cpu_request or str(2 + 2 * gpus),
        "memory": inp.memory_request or f"{8 + 8 * gpus}Gi",
    }


def _vllm_container(inp: RenderInput) -> dict[str, Any]:
    env = [
        {"name": ENV_ENGINE_ARGS, "value": json.dumps(list(inp.engine_args))},
        {"name": ENV_VLLM_HOST, "value": VLLM_HOST},
        {"name": ENV_VLLM_PORT, "value": str(VLLM_PORT)},
        {"name": ENV_EXPECTED_GPU_PRODUCT, "value": inp.node_gpu_label or inp.gpu_product},
        {"name": ENV_EXPECTED_COMPUTE_CAPABILITY, "value": inp.expected_compute_capability},
        {"name": ENV_EXPECTED_GPU_COUNT, "value": str(inp.gpus_per_replica)},
        {"name": ENV_FP8_POLICY, "value": inp.fp8_policy},
        {"name": ENV_PROBE_FILE, "value": PROBE_FILE},
        {"name": "PYTHONPATH", "value": RUNTIME_MOUNT},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        # Caches (Hugging Face, torch compile, Triton) go under HOME, writable by the
        # non-root user on an emptyDir.
        {"name": "HOME", "value": HOME_DIR},
    ]
    env += [{"name": k, "value": v} for k, v in inp.engine_env]
    gpus = str(inp.gpus_per_replica)
    # vLLM listens on loopback only; startup and readiness reach its /health through the
    # gateway. Liveness asks the engine itself from inside its container, so a hung engine
    # restarts the engine's container whatever state the gateway is in.
    health = {"httpGet": {"path": HEALTH_PATH, "port": GATEWAY_PORT}}
    engine_health = {
        "exec": {
            "command": [
                "python3", "-c",
                "import urllib.request; urllib.request.urlopen("
                f"'http://{VLLM_HOST}:{VLLM_PORT}{HEALTH_PATH}', timeout=5)",
            ]
        },
        "timeoutSeconds": 10,
    }
    return {
        "name": "vllm",
        "image": inp.engine_image,
        # The launcher (copied in by the init container) probes the GPUs, falls back from
        # settings the node cannot run, then execs vLLM's OpenAI server.
        "command": ["python3", "-m", "slo_runtime.cli", "launch"],
        "env": env,
        "resources": {
            "limits": {inp.gpu_resource: gpus},
            "requests": {inp.gpu_resource: gpus, **host_requests(inp)},
        },
        "securityContext": _container_security(read_only_root=False),
        # Model loading takes minutes; the startup probe holds liveness off until then.
        "startupProbe": {**health, "periodSeconds": 10, "failureThreshold": 180},
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**engine_health, "periodSeconds": 15, "failureThreshold": 4},
        "lifecycle": _pre_stop(),
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "home", "mountPath": HOME_DIR},
            {"name": "slo-runtime", "mountPath": RUNTIME_MOUNT, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR},
        ],
    }


def _pre_stop() -> dict[str, Any]:
    """Serve on while the pod leaves the endpoints (``PRE_STOP_SLEEP_S``)."""
    return {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}}


def _gateway_container(inp: RenderInput) -> dict[str, Any]:
    return {
        "name": "gateway",
        "image": inp.runtime_image,
        "command": [
            "slo-runtime",
            "gateway",
            "--port",
            str(GATEWAY_PORT),
            "--upstream",
            f"http://{VLLM_HOST}:{VLLM_PORT}",
        ],
        "env": [
            {"name": ENV_INFLIGHT_LIMIT_FILE, "value": LIMIT_FILE},
            {"name": ENV_INFLIGHT_LIMIT, "value": str(inp.batch_ceiling)},
            {"name": ENV_PROBE_FILE, "value": PROBE_FILE},
        ],
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "periodSeconds": 5},
        "lifecycle": _pre_stop(),
        "securityContext": _container_security(read_only_root=True),
        "resources": {
            "requests": {"cpu": "250m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "volumeMounts": [
            {"name": LIMIT_VOLUME, "mountPath": LIMIT_DIR, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR, "readOnly": True},
        ],
    }


def _inject_container(inp: RenderInput) -> dict[str, Any]:
    # Copies the pure-Python runtime into a shared volume so the launcher runs with the
    # vLLM image's own Python, without building an image per vLLM release.
    copy = (
        "cp -R \"$(python3 -c 'import os, slo_runtime; "
        "print(os.path.dirname(slo_runtime.__file__))')\" " + RUNTIME_MOUNT + "/"
    )
    return {
        "name": "slo-runtime-inject",
        "image": inp.runtime_image,
        "command": ["sh", "-c", copy],
        "securityContext": _container_security(read_only_root=True),
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "slo-runtime", "mountPath": RUNTIME_MOUNT}],
    }


def build_deployment(inp: RenderInput) -> dict[str, Any]:
    """The vLLM Deployment: launcher, gateway, GPU resources, pool affinity."""
    labels = {**common_labels(inp), **variant_selector(inp)}
    pod_spec: dict[str, Any] = {
        "initContainers": [_inject_container(inp)],
        "containers": [_vllm_container(inp), _gateway_container(inp)],
        # vLLM drains in-flight requests on SIGTERM; long generations need the time.
        "terminationGracePeriodSeconds": 120,
        "securityContext": _pod_security(),
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "home", "emptyDir": {}},
            {"name": "slo-runtime", "emptyDir": {}},
            {"name": "run", "emptyDir": {}},
            {
                "name": LIMIT_VOLUME,
                "downwardAPI": {
                    "items": [
                        {
                            "path": LIMIT_FILE_NAME,
                            "fieldRef": {
                                "fieldPath": f"metadata.annotations['{ANNOTATION_INFLIGHT_LIMIT}']"
                            },
                        }
                    ]
                },
            },
        ],
    }
    affinity = _affinity(inp)
    if affinity:
        pod_spec["affinity"] = affinity
    if inp.node_selector:
        pod_spec["nodeSelector"] = dict(sorted(inp.node_selector.items()))
    tolerations = [dict(t) for t in inp.tolerations]
    # GPU nodes are commonly tainted for their resource; tolerate it so GPUs are usable.
    tolerations.append({"key": inp.gpu_resource, "operator": "Exists", "effect": "NoSchedule"})
    pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_metadata(inp, variant_name(inp.name, inp.variant)), "labels": labels},
        "spec": {
            "replicas": inp.replicas,
            "selector": {"matchLabels": variant_selector(inp)},
            # Surge, never unavailable: a restart never drops capacity below the SLO's
            # needs (ROLLOUT_SURGE_PERCENT says why a quarter at once).
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": f"{ROLLOUT_SURGE_PERCENT}%",
                                  "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    # No live-limit annotation here: the limit is patched onto running
                    # pods; until then the gateway reads an empty file and keeps the
                    # ceiling from its env.
                    "annotations": {
                        ANNOTATION_SERVICE_NAME: inp.name,
                        ANNOTATION_ENGINE_HASH: engine_hash(inp),
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(GATEWAY_PORT),
                        "prometheus.io/path": GATEWAY_METRICS_PATH,
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def build_service(inp: RenderInput) -> dict[str, Any]:
    """The Service in front of the pods' gateway port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(inp, service_name(inp.name)),
        "spec": {
            "selector": selector_labels(inp),
            "ports": [
                {"name": SERVICE_PORT_NAME, "port": GATEWAY_PORT, "targetPort": "http",
                 "protocol": "TCP"},
            ],
        },
    }


def activator_route_name(service: str) -> str:
    """Name of the EndpointSlice that routes the service's Service to the activator."""
    return child_name(service_name(service), "activator")


def build_activator_route(inp: RenderInput, activator: ActivatorEndpoints) -> dict[str, Any]:
    """An EndpointSlice of the service's Service listing the activator's Ready pods on its
    port (named like the Service's port): kube-proxy merges it with the endpoint
    controller's slice of the pods, so requests reach the activator while no pod is Ready
    (``api.activation``). Owned by the InferenceService."""
    meta = _metadata(inp, activator_route_name(inp.name))
    meta["labels"] = {**meta["labels"], LABEL_SERVICE_NAME: service_name(inp.name),
                      LABEL_SLICE_MANAGED_BY: SLICE_MANAGED_BY}
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": meta,
        "addressType": activator.address_type,
        "ports": [{"name": SERVICE_PORT_NAME, "port": activator.port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}}
                      for a in activator.addresses],
    }


def build_pdb(inp: RenderInput) -> dict[str, Any]:
    """The PodDisruptionBudget: one replica at a time during drains."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(inp, _instance_name(inp)),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(inp)},
            # Pods that never became ready must not block node drains.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def live_limit_patch(limit: int) -> dict[str, Any]:
    """Merge patch that sets one running pod's live in-flight limit."""
    return {"metadata": {"annotations": {ANNOTATION_INFLIGHT_LIMIT: str(limit)}}}


def build_all(inp: RenderInput,
              variants: Sequence[RenderInput] | None = None) -> list[dict[str, Any]]:
    """Every object the operator applies for one service: a Deployment per variant in
    ``variants`` (default: ``inp``'s own), then the service-wide Service and
    PodDisruptionBudget from ``inp``."""
    deployments = [build_deployment(v) for v in (variants if variants is not None else [inp])]
    return [*deployments, build_service(inp), build_pdb(inp)]
