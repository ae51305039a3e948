"""The InferencePool of one InferenceService (Gateway API Inference Extension), as a dict.

Pure, like ``render.objects``: an InferencePool (``inference.networking.k8s.io/v1``) that
selects the service's pods on every GPU variant (the labels the Service and the PDB select
on, ``objects.selector_labels``), targets the in-pod gateway's port (admission, tenant
queues and the picker's queue metric live there; vLLM listens on loopback only) and names
the endpoint picker the user chose. Field names follow the v1 schema of
sigs.k8s.io/gateway-api-inference-extension (config/crd/bases/
inference.networking.k8s.io_inferencepools.yaml, copied in tests/fixtures/crds/).
"""

from __future__ import annotations

from typing import Any

from slo_operator.api.models import InferencePoolRouting
from slo_operator.render.names import ANNOTATION_SERVICE_NAME, child_name
from slo_operator.render.objects import (
    RenderInput,
    common_labels,
    owner_reference,
    selector_labels,
)
from slo_runtime.contract import GATEWAY_PORT, LABEL_GPU

INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_VERSION = "v1"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/{INFERENCE_POOL_VERSION}"
INFERENCE_POOL_KIND = "InferencePool"
# The CRD's name, for messages that tell a user what to install.
INFERENCE_POOL_CRD = f"inferencepools.{INFERENCE_POOL_GROUP}"


def inference_pool_name(service: str) -> str:
    """Name of the service's InferencePool: the Service's own name (another kind, so no
    clash), which an HTTPRoute's backendRef names."""
    return child_name(service)


def build_inference_pool(inp: RenderInput, routing: InferencePoolRouting) -> dict[str, Any]:
    """The InferencePool over every variant's pods, on the gateway's port.

    ``routing.endpoint_picker_ref`` must be set (the API model requires it when enabled).
    The GPU label is left off: the pool spans every variant, whatever the primary's GPU.
    """
    picker = routing.endpoint_picker_ref
    if picker is None:
        raise ValueError("spec.routing.inferencePool.endpointPickerRef is required")
    labels = {k: v for k, v in common_labels(inp).items() if k != LABEL_GPU}
    meta: dict[str, Any] = {
        "name": inference_pool_name(inp.name),
        "namespace": inp.namespace,
        "labels": labels,
        "annotations": {ANNOTATION_SERVICE_NAME: inp.name},
    }
    if inp.uid:  # without the owner's UID (a preview) no owner reference, as in objects
        meta["ownerReferences"] = [owner_reference(inp)]
    ref: dict[str, Any] = {
        "group": picker.group,
        "kind": picker.kind,
        "name": picker.name,
        "port": {"number": picker.port},
        "failureMode": picker.failure_mode,
    }
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": selector_labels(inp)},
            "targetPorts": [{"number": GATEWAY_PORT}],
            "endpointPickerRef": ref,
        },
    }
