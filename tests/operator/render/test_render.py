"""Render: the objects built for one service, as tables over the inputs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slo_operator.render.objects import (
    ANNOTATION_INFLIGHT_LIMIT,
    LABEL_SERVICE,
    LABEL_TENANT,
    RenderInput,
    build_all,
    build_deployment,
    build_pdb,
    build_service,
    engine_hash,
    live_limit_patch,
)
from slo_runtime.contract import VLLM_HOST, VLLM_PORT


def make_input(**kw: Any) -> RenderInput:
    base: dict[str, Any] = dict(
        name="llama", namespace="team-a", uid="uid-1", engine_image="vllm/vllm-openai:v0.32.0",
        runtime_image="slo-operator:test", engine_args=("--model", "m", "--max-num-seqs", "64"),
        gpus_per_replica=1, gpu_resource="nvidia.com/gpu", gpu_product="H100-SXM-80GB",
        pool_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, replicas=2,
        batch_ceiling=64, tenant="gold", policy="chat",
    )
    base.update(kw)
    return RenderInput(**base)


def _container(dep: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == name)


@pytest.mark.parametrize(
    ("kw", "want_resource", "want_gpus"),
    [
        pytest.param({}, "nvidia.com/gpu", "1", id="one-nvidia-gpu"),
        pytest.param({"gpus_per_replica": 4}, "nvidia.com/gpu", "4", id="tensor-parallel-4"),
        pytest.param({"gpu_resource": "amd.com/gpu", "gpus_per_replica": 2}, "amd.com/gpu", "2",
                     id="amd-resource-name"),
        pytest.param({"gpu_resource": "habana.ai/gaudi"}, "habana.ai/gaudi", "1", id="gaudi"),
    ],
)
def test_gpu_resources(kw: dict[str, Any], want_resource: str, want_gpus: str) -> None:
    vllm = _container(build_deployment(make_input(**kw)), "vllm")
    assert vllm["resources"]["limits"] == {want_resource: want_gpus}
    requests = vllm["resources"]["requests"]
    assert requests[want_resource] == want_gpus
    # Host CPU and memory are requested too (quota-enforcing namespaces demand them).
    assert int(requests["cpu"]) >= 2 + 2 * int(want_gpus)
    assert requests["memory"].endswith("Gi")


def test_engine_args_reach_the_launcher_verbatim() -> None:
    inp = make_input()
    env = {e["name"]: e.get("value") for e in _container(build_deployment(inp), "vllm")["env"]}
    assert json.loads(env["SLO_ENGINE_ARGS"]) == list(inp.engine_args)
    assert env["SLO_EXPECTED_GPU_PRODUCT"] == "H100-SXM-80GB"


def test_node_affinity_pins_the_pool_and_extra_selector() -> None:
    dep = build_deployment(make_input(node_selector={"zone": "a"}))
    spec = dep["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert exprs == [{"key": "nvidia.com/gpu.product", "operator": "In",
                      "values": ["NVIDIA-H100-80GB-HBM3"]}]
    assert spec["nodeSelector"] == {"zone": "a"}


def test_no_pool_means_no_affinity() -> None:
    assert "affinity" not in build_deployment(make_input(pool_selector={}))["spec"]["template"][
        "spec"]


def test_labels_attribute_series_to_service_and_tenant() -> None:
    dep = build_deployment(make_input())
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels[LABEL_SERVICE] == "llama"
    assert labels[LABEL_TENANT] == "gold"
    # The selector must be a subset of the pod labels or the API server rejects it.
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_tenant_defaults_to_namespace() -> None:
    labels = build_deployment(make_input(tenant=""))["metadata"]["labels"]
    assert labels[LABEL_TENANT] == "team-a"


def test_probes_and_graceful_termination() -> None:
    dep = build_deployment(make_input())
    vllm = _container(dep, "vllm")
    for probe in ("startupProbe", "readinessProbe"):
        assert vllm[probe]["httpGet"]["path"] == "/health"
    # Liveness asks the engine itself on loopback, not the gateway in front of it.
    command = " ".join(vllm["livenessProbe"]["exec"]["command"])
    assert f"http://{VLLM_HOST}:{VLLM_PORT}/health" in command
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_live_batch_limit_flows_through_downward_api() -> None:
    dep = build_deployment(make_input(batch_ceiling=96))
    tmpl = dep["spec"]["template"]
    # The live limit is patched onto running pods; the template never carries it.
    assert ANNOTATION_INFLIGHT_LIMIT not in tmpl["metadata"]["annotations"]
    vol = next(v for v in tmpl["spec"]["volumes"] if v["name"] == "inflight-limit")
    path = vol["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
    assert ANNOTATION_INFLIGHT_LIMIT in path
    gw = _container(dep, "gateway")
    env = {e["name"]: e["value"] for e in gw["env"]}
    assert env["SLO_INFLIGHT_LIMIT_FILE"].startswith("/etc/slo-runtime/")
    # Until the first patch the gateway starts at the ceiling pinned in --max-num-seqs.
    assert env["SLO_INFLIGHT_LIMIT"] == "96"


def test_live_limit_patch_sets_only_the_annotation() -> None:
    assert live_limit_patch(17) == {"metadata": {"annotations": {ANNOTATION_INFLIGHT_LIMIT: "17"}}}


def test_preview_without_uid_has_no_owner_reference() -> None:
    # An all-zero or empty UID would let the garbage collector delete applied previews.
    for obj in build_all(make_input(uid="")):
        assert "ownerReferences" not in obj["metadata"]


def test_every_object_is_owned_by_the_service() -> None:
    for obj in build_all(make_input()):
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "inference.slo-operator.io/v1alpha1",
                         "kind": "InferenceService", "name": "llama", "uid": "uid-1",
                         "controller": True, "blockOwnerDeletion": True}]
        assert obj["metadata"]["namespace"] == "team-a"


def test_service_and_pdb_select_the_pods() -> None:
    inp = make_input()
    pod_labels = build_deployment(inp)["spec"]["template"]["metadata"]["labels"]
    assert build_service(inp)["spec"]["selector"].items() <= pod_labels.items()
    assert build_pdb(inp)["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize(
    ("change", "want_same"),
    [
        pytest.param({"replicas": 7}, True, id="replicas-do-not-restart"),
        pytest.param({"engine_args": ("--model", "m", "--max-num-seqs", "32")}, False,
                     id="engine-args-change-hash"),
        pytest.param({"engine_image": "vllm/vllm-openai:v0.33.0"}, False, id="image-changes-hash"),
    ],
)
def test_engine_hash_tracks_only_restart_fields(change: dict[str, Any], want_same: bool) -> None:
    assert (engine_hash(make_input()) == engine_hash(make_input(**change))) is want_same


def test_pod_template_is_the_same_whatever_the_live_limit() -> None:
    """The live limit is not a render input at all: plans that differ only in the
    controller's live limit render byte-identical pod templates (no rollout)."""
    from tests.operator.reconcile.test_desired import plan_with_limit

    low, high = plan_with_limit("live", 16), plan_with_limit("live", 200)
    assert build_deployment(low)["spec"]["template"] == build_deployment(high)["spec"]["template"]
    # Under batching.mode restart the limit is baked into --max-num-seqs: the template moves.
    r_low, r_high = plan_with_limit("restart", 16), plan_with_limit("restart", 200)
    assert (build_deployment(r_low)["spec"]["template"]
            != build_deployment(r_high)["spec"]["template"])


def test_user_env_cannot_collide_with_the_operators_env() -> None:
    """Every env name the operator sets is one the API refuses from users (duplicate keys
    make server-side apply fail)."""
    from slo_operator.api.models import OPERATOR_ENV_NAMES, OPERATOR_ENV_PREFIX

    dep = build_deployment(make_input(engine_env=(("QUANT_CONFIG", "/q.json"),)))
    for container in dep["spec"]["template"]["spec"]["containers"]:
        for e in container.get("env", []):
            assert e["name"].startswith(OPERATOR_ENV_PREFIX) or e["name"] in OPERATOR_ENV_NAMES


def test_pod_meets_pod_security_restricted() -> None:
    pod = build_deployment(make_input())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"] + pod["initContainers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
    assert all(set(v) & {"emptyDir", "downwardAPI"} for v in pod["volumes"])
