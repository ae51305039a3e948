"""Hostile documents against the real API server (server-side dry run).

A sample of the documents ``tests/operator/test_hostile_inputs.py`` generates goes to the API
server twice: the InferenceService and SLOPolicy themselves (accepted, or refused with the
CRD's schema or CEL message), and what ``slo-operator render`` prints for them, applied the
way the operator applies it (server-side apply), into a namespace that enforces PodSecurity
``restricted``. Whatever render accepts, the API server must accept; never a 5xx, never a
traceback. The in-process property test covers thousands of documents; this sample is kept
to a few hundred so it stays quick on two cores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from slo_devtools.devenv.control_plane import ClusterError, LocalCluster
from slo_devtools.devenv.gpu_nodes import GpuNodeType, NodeGroup, fixture_labels
from slo_operator.api.models import GROUP
from slo_operator.render.names import ANNOTATION_SERVICE_NAME, service_label
from slo_operator.render.objects import service_name
from tests.integration.operator_support import (
    OperatorProcess,
    chart_operator,
    conditions,
    events_for,
    install_crds,
)
from tests.operator.test_hostile_inputs import (
    RENDER_TARGET,
    _last_value,
    _node_label_files,
    documents,
    render_docs,
)

SAMPLE = int(os.environ.get("SLO_HOSTILE_SAMPLE", "200"))
MANAGER = "slo-operator"


@pytest.fixture(scope="module")
def api(cluster: LocalCluster) -> Iterator[DynamicClient]:
    install_crds(cluster)
    client = cluster.api_client()
    yield DynamicClient(client)  # type: ignore[no-untyped-call]
    client.close()  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def restricted_ns(cluster: LocalCluster) -> Iterator[str]:
    """A namespace that enforces PodSecurity restricted, with its default ServiceAccount."""
    name = cluster.create_namespace(labels={
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"})
    cluster.wait_for(
        lambda: _exists(lambda: cluster.core.read_namespaced_service_account("default", name)),
        timeout=60, desc=f"ServiceAccount {name}/default")
    yield name
    cluster.core.delete_namespace(name)


@pytest.fixture(scope="module")
def label_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _node_label_files(tmp_path_factory.mktemp("nodes"))


def _exists(read: Any) -> bool:
    try:
        read()
        return True
    except ApiException:
        return False


def _dry_apply(api: DynamicClient, obj: dict[str, Any], namespace: str) -> ApiException | None:
    """Server-side apply with dryRun=All; the refusal, if any."""
    body = {**obj, "metadata": {**obj.get("metadata", {}), "namespace": namespace}}
    resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        api.server_side_apply(  # type: ignore[no-untyped-call]
            resource, body=body, name=body["metadata"]["name"], namespace=namespace,
            field_manager=MANAGER, force_conflicts=True, dry_run="All")
    except ApiException as err:
        return err
    return None


def _dry_create(api: DynamicClient, obj: dict[str, Any], namespace: str) -> ApiException | None:
    """Create with dryRun=All, as `kubectl apply` does for a new object; the refusal."""
    body = {**obj, "metadata": {**obj.get("metadata", {}), "namespace": namespace}}
    resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        api.create(resource, body=body, namespace=namespace,  # type: ignore[no-untyped-call]
                   dry_run="All")
    except ApiException as err:
        return err
    return None


def _pod_from(deployment: dict[str, Any]) -> dict[str, Any]:
    tmpl = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": deployment["metadata"]["name"], **{
                k: v for k, v in tmpl["metadata"].items() if k != "name"}},
            "spec": tmpl["spec"]}


@settings(max_examples=SAMPLE, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(docs=documents(), target=RENDER_TARGET)
def test_what_render_accepts_the_api_server_accepts(
    api: DynamicClient, restricted_ns: str, label_files: list[str], docs: list[Any],
    target: list[Any],
) -> None:
    # The custom resources themselves, as `kubectl apply` creates them: accepted, or
    # refused by the schema/CEL with a message, never a server error. (Server-side apply
    # answers a value of the wrong type with a 500 "failed to create typed patch object"
    # naming the field: the API server's behaviour, so the documents go through create.)
    for doc in docs:
        if not isinstance(doc.get("metadata"), dict) or not isinstance(
                doc["metadata"].get("name"), str) or not doc["metadata"]["name"]:
            continue  # no name to send; the API would need generateName
        err = _dry_create(api, doc, restricted_ns)
        if err is not None:
            assert err.status is not None and 400 <= err.status < 500, err
            assert err.body, err

    status, _, objects = render_docs(docs, target, label_files)
    if status != 0:
        return
    for obj in objects:
        err = _dry_apply(api, obj, restricted_ns)
        assert err is None, f"{obj['kind']} refused: {err and err.body}\n{yaml.safe_dump(docs)}"
    # PodSecurity is enforced on Pods, not Deployments: admit the template as a Pod.
    err = _dry_apply(api, _pod_from(objects[0]), restricted_ns)
    assert err is None, f"pod refused: {err and err.body}\n{yaml.safe_dump(docs)}"


@pytest.mark.parametrize("name", ["llama-3.1-8b", "a" * 253, "8b.chat"])
def test_natural_and_long_names_render_to_objects_the_api_accepts(
    api: DynamicClient, restricted_ns: str, label_files: list[str], name: str
) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "llama-8b-h100.yaml"
    policy, svc = yaml.safe_load_all(example.read_text())
    svc["metadata"]["name"] = name
    policy["metadata"]["name"] = svc["spec"]["sloPolicyRef"]["name"] = "p." + "q" * 250
    for doc in (policy, svc):
        assert _dry_create(api, doc, restricted_ns) is None
    status, output, objects = render_docs([policy, svc], [], label_files)
    assert status == 0, output
    for obj in objects:
        assert obj["metadata"]["annotations"][ANNOTATION_SERVICE_NAME] == name
        err = _dry_apply(api, obj, restricted_ns)
        assert err is None, err and err.body


@pytest.mark.parametrize(
    ("patch", "want"),
    [
        pytest.param({"hardware": {"tolerations": [{"key": "", "operator": "Equal",
                                                    "value": "x"}]}},
                     "an empty key needs operator Exists", id="empty-key-equal"),
        pytest.param({"hardware": {"tolerations": [{"key": "k", "operator": "Exists",
                                                    "value": "x"}]}},
                     "operator Exists takes no value", id="exists-with-value"),
        pytest.param({"hardware": {"tolerations": [{"key": "k", "tolerationSeconds": 5}]}},
                     "tolerationSeconds needs effect NoExecute", id="seconds-without-noexecute"),
        pytest.param({"engine": {"env": [{"name": "A"}, {"name": "A"}]}},
                     "each name may appear once", id="env-repeated"),
        pytest.param({"engine": {"env": [{"name": "PYTHONPATH", "value": "/x"}]}},
                     "are set by the operator", id="env-operator-owned"),
        pytest.param({"model": {"name": "--trust-remote-code", "sizeBillions": 8}},
                     "spec.model.name", id="model-name-is-a-flag"),
    ],
)
def test_crd_refuses_what_the_pod_api_would(
    api: DynamicClient, restricted_ns: str, patch: dict[str, Any], want: str
) -> None:
    svc: dict[str, Any] = {
        "apiVersion": "inference.slo-operator.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "bad"},
        "spec": {"model": {"name": "org/m", "sizeBillions": 8}, **patch}}
    err = _dry_create(api, svc, restricted_ns)
    assert err is not None and err.status == 422, err
    assert want in str(err.body), err.body



# ----------------------------------------------------------------- the operator, for real

def _odd_nodes() -> list[NodeGroup]:
    """A MIG mixed-strategy H100, a MIG single-strategy A100 (1g.5gb) and a time-sliced T4,
    labelled exactly as the GPU Operator documents them."""
    mixed = fixture_labels("NVIDIA-H100-80GB-HBM3 (MIG mixed, all-balanced)")
    single = fixture_labels("A100-SXM4-40GB-MIG-1g.5gb")
    t4 = fixture_labels("Tesla-T4-SHARED")
    return [
        NodeGroup(GpuNodeType(key="h100-mig-mixed", resource="nvidia.com/gpu", gpus=0,
                              labels=mixed, extra_allocatable={
                                  "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1",
                                  "nvidia.com/mig-3g.40gb": "1"}), 1),
        NodeGroup(GpuNodeType(key="a100-mig-single", resource="nvidia.com/gpu", gpus=7,
                              labels=single), 1),
        NodeGroup(GpuNodeType(key="t4-time-sliced", resource="nvidia.com/gpu", gpus=16,
                              labels=t4), 1),
    ]


@pytest.fixture(scope="module")
def odd_operator(cluster: LocalCluster, api: DynamicClient,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    names = cluster.add_nodes(_odd_nodes(), prefix="odd")
    try:
        with chart_operator(cluster, tmp_path_factory.mktemp("operator"), interval=2.0) as op:
            yield op
    finally:
        for name in names:  # other suites' services must not land on these pools
            cluster.core.delete_node(name)


def _svc(name: str, *, products: list[str], size: float, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"model": {"name": "org/model", "sizeBillions": size, "maxModelLen": 1024},
                     "hardware": {"gpuProducts": products}, **spec}}


def _running(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l",
                                f"{GROUP}/service={service_label(name)}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def test_natural_long_and_odd_hardware_services_reconcile_to_running_pods(
    cluster: LocalCluster, odd_operator: OperatorProcess, namespace: str
) -> None:
    long_name = "l" * 253
    services = [
        _svc("llama-3.1-8b", products=["H100-80GB"], size=8),
        _svc(long_name, products=["H100-80GB"], size=8),
        _svc("mig-chat", products=["MIG-1g.10gb"], size=0.5),
        _svc("mig-single", products=["A100-SXM4-40GB-MIG-1g.5gb"], size=0.5),
        _svc("shared-t4", products=["T4"], size=0.5),
    ]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(services))
    for svc in services:
        name = svc["metadata"]["name"]
        cluster.wait_for(lambda n=name: len(_running(cluster, namespace, n)) >= 1,
                         timeout=120, desc=f"a Running pod of {name[:40]}")
        # The Service exists under its DNS-safe name and selects the pods.
        service = cluster.wait_for(
            lambda n=name: cluster.kubectl_json("get", "service", "-n", namespace,
                                                service_name(n)),
            timeout=60, desc=f"Service of {name[:40]}", ignore=(ClusterError,))
        assert service["metadata"]["annotations"][ANNOTATION_SERVICE_NAME] == name
        # The Service can exist before the first status write lands: await the condition.
        ready = cluster.wait_for(
            lambda n=name: conditions(cluster.kubectl_json("get", "infsvc", "-n", namespace,
                                                           n)).get("Ready"),
            timeout=60, desc=f"Ready condition of {name[:40]}")
        assert ready["status"] == "True" or ready["reason"] != "ApplyFailed", ready

    def pod_of(name: str) -> dict[str, Any]:
        return _running(cluster, namespace, name)[0]

    def args_of(name: str) -> list[str]:
        env = pod_of(name)["spec"]["containers"][0]["env"]
        return list(yaml.safe_load(next(e["value"] for e in env
                                        if e["name"] == "SLO_ENGINE_ARGS")))

    mig = pod_of("mig-chat")["spec"]["containers"][0]["resources"]["limits"]
    assert mig == {"nvidia.com/mig-1g.10gb": "1"}  # the slice the device plugin advertises
    assert _last_value(args_of("mig-chat"), "--tensor-parallel-size") == "1"
    single = pod_of("mig-single")["spec"]["containers"][0]["resources"]["limits"]
    assert single == {"nvidia.com/gpu": "1"}  # single strategy: MIG devices as nvidia.com/gpu
    t4 = args_of("shared-t4")
    assert _last_value(t4, "--tensor-parallel-size") == "1"
    assert float(_last_value(t4, "--gpu-memory-utilization")) == pytest.approx(0.225)
    notes = cluster.kubectl_json("get", "infsvc", "-n", namespace, "shared-t4")["status"][
        "engineNotes"]
    assert any("time-sliced 4 ways" in n for n in notes)
    # Events reach even the 253-character name (generateName is truncated by the server).
    assert cluster.wait_for(lambda: events_for(cluster, namespace, long_name), timeout=30,
                            desc="an Event on the long-named service")
    assert "Traceback" not in odd_operator.logs()
