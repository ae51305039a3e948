"""The InferencePool render: every variant's pods, the gateway's port, the user's picker."""

from __future__ import annotations

import pytest

from slo_operator.api.models import InferencePoolRouting
from slo_operator.render.inference_pool import (
    INFERENCE_POOL_API_VERSION,
    build_inference_pool,
    inference_pool_name,
)
from slo_operator.render.objects import (
    LABEL_GPU,
    RenderInput,
    build_all,
    build_deployment,
    build_service,
)
from slo_runtime.contract import GATEWAY_PORT

BASE = RenderInput(name="chat", namespace="team-a", uid="uid-1", engine_image="vllm:x",
                   runtime_image="rt:x", engine_args=(), gpu_product="NVIDIA-H100-80GB-HBM3",
                   variant="h100-80gb", tenant="acme", policy="gold")
ROUTING = InferencePoolRouting.model_validate(
    {"enabled": True, "endpointPickerRef": {"name": "chat-epp"}})


def test_pool_selects_the_pods_of_every_variant_and_no_other_service() -> None:
    other = RenderInput(**{**BASE.__dict__, "variant": "a100-80gb",
                           "gpu_product": "NVIDIA-A100-SXM4-80GB"})
    pool = build_inference_pool(BASE, ROUTING)
    match = pool["spec"]["selector"]["matchLabels"]
    for inp in (BASE, other):
        pod_labels = build_deployment(inp)["spec"]["template"]["metadata"]["labels"]
        assert match.items() <= pod_labels.items()
    stranger = RenderInput(**{**BASE.__dict__, "name": "search"})
    pod_labels = build_deployment(stranger)["spec"]["template"]["metadata"]["labels"]
    assert not match.items() <= pod_labels.items()
    # The same pods the Service sends to.
    assert match == build_service(BASE)["spec"]["selector"]


def test_pool_targets_the_gateway_port_and_names_the_users_picker() -> None:
    routing = InferencePoolRouting.model_validate({"enabled": True, "endpointPickerRef": {
        "name": "epp", "port": 9100, "failureMode": "FailOpen"}})
    pool = build_inference_pool(BASE, routing)
    assert pool["apiVersion"] == INFERENCE_POOL_API_VERSION
    assert pool["kind"] == "InferencePool"
    assert pool["spec"]["targetPorts"] == [{"number": GATEWAY_PORT}]
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "", "kind": "Service", "name": "epp", "port": {"number": 9100},
        "failureMode": "FailOpen"}


def test_pool_is_owned_by_the_service_and_labelled_without_one_variants_gpu() -> None:
    pool = build_inference_pool(BASE, ROUTING)
    meta = pool["metadata"]
    assert meta["name"] == inference_pool_name("chat") == "chat"
    assert meta["namespace"] == "team-a"
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "InferenceService", "chat", "uid-1", True)
    assert LABEL_GPU not in meta["labels"]


def test_preview_without_uid_writes_no_owner_reference() -> None:
    pool = build_inference_pool(RenderInput(**{**BASE.__dict__, "uid": ""}), ROUTING)
    assert "ownerReferences" not in pool["metadata"]


def test_pool_is_not_among_the_always_applied_objects() -> None:
    assert "InferencePool" not in {o["kind"] for o in build_all(BASE)}


def test_pool_without_a_picker_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"spec\.routing\.inferencePool\.endpointPickerRef"):
        build_inference_pool(BASE, InferencePoolRouting())
