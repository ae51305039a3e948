"""The real operator against the real API server, under the chart's least-privilege role."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    ROOT,
    OperatorProcess,
    chart_operator,
    conditions,
    deployments_of,
    install_crds,
    only_deployment,
    wait_event,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crds(cluster: LocalCluster) -> None:
    install_crds(cluster)


@pytest.fixture(scope="module")
def running_operator(
    cluster: LocalCluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    with chart_operator(cluster, tmp_path_factory.mktemp("operator"), log_tail=6000) as op:
        yield op


def isvc(name: str, *, products: list[str], size: float = 8, policy: str | None = None,
         **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": f"org/{name}", "sizeBillions": size, "maxModelLen": 4096},
            "hardware": {"gpuProducts": products},
            **spec,
        },
    }
    if policy:
        body["spec"]["sloPolicyRef"] = {"name": policy}
    return body


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
            "metadata": {"name": name}, "spec": spec}


def apply(cluster: LocalCluster, ns: str, *objs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objs))


def get_isvc(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.kubectl_json("get", "infsvc", "-n", ns, name)
    return obj


def wait_condition(cluster: LocalCluster, ns: str, name: str, ctype: str, status: str,
                   reason: str | None = None, timeout: float = 90) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        c = conditions(get_isvc(cluster, ns, name)).get(ctype)
        if c and c["status"] == status and (reason is None or c["reason"] == reason):
            return c
        return None

    found: dict[str, Any] = cluster.wait_for(
        check, timeout=timeout, desc=f"{name} {ctype}={status} {reason or ''}")
    return found


# ----------------------------------------------------------------- API server validation


@pytest.mark.parametrize(
    ("obj", "want_message"),
    [
        pytest.param(policy("bad-scaling", scaling={"minReplicas": 5, "maxReplicas": 2}),
                     "spec.scaling.minReplicas must be <= spec.scaling.maxReplicas",
                     id="policy-min-gt-max"),
        pytest.param(policy("bad-batch", batching={"minBatch": 64, "maxBatch": 8}),
                     "spec.batching.minBatch must be <= spec.batching.maxBatch",
                     id="batch-min-gt-max"),
        pytest.param(policy("bad-target", objectives={"e2eLatencyMs": -1}),
                     "spec.objectives.e2eLatencyMs", id="negative-target"),
        pytest.param(policy("bad-pct", objectives={"ttftPercentile": 1.5}),
                     "spec.objectives.ttftPercentile", id="percentile-above-one"),
        pytest.param(policy("zero-window", window="0s"), "spec.window must be at least 5s",
                     id="window-of-zero"),
        pytest.param(policy("short-period", window="10m", attainmentPeriod="5m"),
                     "spec.attainmentPeriod must be at least spec.window",
                     id="attainment-period-shorter-than-the-window"),
        pytest.param(isvc("bad-precision", products=["H100"], engine={"precision": "fp4"}),
                     'spec.engine.precision: Unsupported value: "fp4"', id="unknown-precision"),
        pytest.param(isvc("bad-replicas", products=["H100"], replicas={"min": 3, "max": 1}),
                     "spec.replicas.min must be <= spec.replicas.max", id="isvc-min-gt-max"),
        pytest.param({**isvc("no-size", products=["H100"]),
                      "spec": {"model": {"name": "org/x"}}},
                     "spec.model.sizeBillions: Required value", id="missing-model-size"),
    ],
)
def test_api_server_rejects_bad_specs(cluster: LocalCluster, crds: None, namespace: str,
                                      obj: dict[str, Any], want_message: str) -> None:
    proc = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj),
                           check=False)
    assert proc.returncode != 0
    assert want_message in proc.stderr, proc.stderr


def test_api_server_fills_policy_defaults(cluster: LocalCluster, crds: None,
                                          namespace: str) -> None:
    apply(cluster, namespace, policy("defaults"))
    spec = cluster.kubectl_json("get", "slo", "-n", namespace, "defaults")["spec"]
    assert spec["objectives"]["e2eLatencyMs"] == 800
    assert spec["objectives"]["ttftMs"] == 300
    assert spec["batching"]["mode"] == "live"


# ----------------------------------------------------------------- reconcile for real


def test_service_becomes_fp8_deployment_on_h100_nodes(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace, policy("gold", scaling={"minReplicas": 2, "maxReplicas": 4}),
          isvc("chat", products=["H100"], policy="gold"))
    ready = wait_condition(cluster, namespace, "chat", "Ready", "True", timeout=120)
    assert ready["reason"] == "Available"

    dep = only_deployment(cluster, namespace, "chat")
    vllm = dep["spec"]["template"]["spec"]["containers"][0]
    args = yaml.safe_load(next(e["value"] for e in vllm["env"] if e["name"] == "SLO_ENGINE_ARGS"))
    assert args[args.index("--quantization") + 1] == "fp8"
    assert args[args.index("--kv-cache-dtype") + 1].startswith("fp8")
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "1"

    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                f"{GROUP}/service=chat")["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        node = cluster.kubectl_json("get", "node", pod["spec"]["nodeName"])
        assert "H100" in node["metadata"]["labels"]["nvidia.com/gpu.product"]

    status = get_isvc(cluster, namespace, "chat")["status"]
    assert status["readyReplicas"] == 2
    assert status["hardware"]["vendor"] == "nvidia"
    assert status["hardware"]["fp8"] is True
    assert status["observedGeneration"] == 1
    assert "--quantization" in status["engineArgs"]

    table = cluster.kubectl("get", "infsvc", "-n", namespace, "chat").stdout
    assert "REPLICAS" in table and "BATCH" in table and "SLO" in table
    wait_event(cluster, namespace, "chat", "HardwareFound")

    # GitOps: the operator leaves the user's object alone apart from status.
    meta = cluster.kubectl_json("get", "infsvc", "-n", namespace, "chat",
                                "--show-managed-fields")["metadata"]
    assert not meta.get("finalizers")
    assert not [k for k in meta.get("annotations", {}) if "kopf" in k or GROUP in k]
    writers = [m for m in meta["managedFields"] if not m["manager"].startswith("kubectl")]
    assert writers and all(m.get("subresource") == "status" for m in writers), writers


def test_same_service_on_a100_gets_bf16_without_fp8_weights(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace, isvc("chat", products=["A100"]))
    wait_condition(cluster, namespace, "chat", "HardwareResolved", "True")
    args = get_isvc(cluster, namespace, "chat")["status"]["engineArgs"]
    assert args[args.index("--dtype") + 1] == "bfloat16"
    assert "--quantization" not in args


def test_pods_pending_when_gpus_run_out_is_reported(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    # The fleet has one node with 8 L4s; three replicas of 4 GPUs cannot all fit.
    apply(cluster, namespace,
          policy("big", scaling={"minReplicas": 3, "maxReplicas": 3}),
          isvc("wide", products=["L4"], policy="big", hardware={
              "gpuProducts": ["L4"], "gpusPerReplica": 4}))
    cond = wait_condition(cluster, namespace, "wide", "Ready", "False", "InsufficientGPUs",
                          timeout=120)
    assert "nvidia.com/gpu" in cond["message"]
    wait_event(cluster, namespace, "wide", "InsufficientGPUs", "Warning")
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                f"{GROUP}/service=wide")["items"]
    phases = sorted(p["status"]["phase"] for p in pods)
    assert phases.count("Running") == 2 and phases.count("Pending") == 1


def test_unknown_or_absent_hardware_is_a_condition_not_a_crash(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace, isvc("nowhere", products=["B200"]),
          isvc("typo", products=["H1OO-XYZ"]))
    cond = wait_condition(cluster, namespace, "nowhere", "Ready", "False", "NoMatchingNodes")
    assert "B200" in cond["message"]
    cond = wait_condition(cluster, namespace, "typo", "Ready", "False", "UnknownGPUProduct")
    assert "spec.hardware.gpuProducts[0]" in cond["message"]
    assert running_operator.proc.poll() is None


def test_engine_problems_are_conditions_with_the_field(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace,
          isvc("odd", products=["H100"], engine={"extraArgs": ["--no-such-flag"]}))
    cond = wait_condition(cluster, namespace, "odd", "Ready", "False", "EngineInfeasible")
    assert "spec.engine.extraArgs[0]" in cond["message"]
    wait_event(cluster, namespace, "odd", "EngineInfeasible", "Warning")
    assert deployments_of(cluster, namespace, "odd") == []


def test_missing_policy_waits_then_binds(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace, isvc("late", products=["H100"], policy="later"))
    cond = wait_condition(cluster, namespace, "late", "Ready", "False", "PolicyNotFound")
    assert "spec.sloPolicyRef.name" in cond["message"]
    apply(cluster, namespace, policy("later"))
    wait_condition(cluster, namespace, "late", "PolicyBound", "True", "PolicyResolved")
    slo = cluster.wait_for(
        lambda: (cluster.kubectl_json("get", "slo", "-n", namespace, "later").get("status")
                 or {}).get("boundServices"), timeout=60, desc="policy status lists late")
    assert slo == ["late"]
    # Deleting the policy does not stop the service; its status says what is missing.
    cluster.kubectl("delete", "slo", "-n", namespace, "later")
    wait_condition(cluster, namespace, "late", "PolicyBound", "False", "PolicyNotFound")


def test_deleting_the_service_garbage_collects_its_objects(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace, isvc("temp", products=["H100"]))
    cluster.wait_for(
        lambda: cluster.kubectl("get", "deploy,svc,pdb", "-n", namespace, "-l",
                                f"{GROUP}/service=temp", "-o", "name").stdout.count("\n") >= 3,
        timeout=90, desc="objects of temp created")
    cluster.kubectl("delete", "infsvc", "-n", namespace, "temp", "--wait=true")

    def gone() -> bool:
        out = cluster.kubectl("get", "deploy,svc,pdb,pods", "-n", namespace, "-l",
                              f"{GROUP}/service=temp", "-o", "name").stdout
        return out.strip() == ""

    cluster.wait_for(gone, timeout=120, desc="owned objects garbage-collected")


def test_render_cli_matches_what_the_operator_applies(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    manifest = yaml.safe_load_all((ROOT / "examples" / "llama-8b-h100.yaml").read_text())
    objs = []
    for o in manifest:
        o["metadata"]["namespace"] = namespace
        objs.append(o)
    apply(cluster, namespace, *objs)
    wait_condition(cluster, namespace, "llama-8b", "HardwareResolved", "True")
    applied = get_isvc(cluster, namespace, "llama-8b")["status"]["engineArgs"]
    out = subprocess.run(
        [sys.executable, "-m", "slo_operator.cli", "render",
         "-f", str(ROOT / "examples" / "llama-8b-h100.yaml"), "-o", "json"],
        capture_output=True, text=True, check=True, cwd=ROOT)
    dep = yaml.safe_load(out.stdout)["items"][0]
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    rendered = yaml.safe_load(next(e["value"] for e in env if e["name"] == "SLO_ENGINE_ARGS"))
    assert rendered == applied


def test_operator_identity_is_not_admin(cluster: LocalCluster,
                                        running_operator: OperatorProcess) -> None:
    args = [str(a) for a in running_operator.proc.args]  # type: ignore[union-attr]
    kubeconfig = Path(args[args.index("--kubeconfig") + 1])
    # Deployments may be deleted (a retired GPU-pool variant); pods and nodes never.
    for verb, resource in (("delete", "pods"), ("delete", "nodes"), ("patch", "nodes")):
        proc = cluster.kubectl("auth", "can-i", verb, resource, "-A",
                               kubeconfig=kubeconfig, check=False)
        assert proc.stdout.strip() == "no", (verb, resource)
    proc = cluster.kubectl("auth", "can-i", "create", "secrets", "-A",
                           kubeconfig=kubeconfig, check=False)
    assert proc.stdout.strip() == "no"



def test_unknown_gpu_product_gets_conservative_settings_and_says_so(
    cluster: LocalCluster, running_operator: OperatorProcess, namespace: str
) -> None:
    from slo_devtools.devenv.gpu_nodes import NodeGroup, nvidia_node_type

    # A GPU no catalogue knows yet, but whose GFD labels say Hopper-class compute.
    future = nvidia_node_type("x900", nvml_name="NVIDIA X900 Prototype", compute=(9, 0),
                              memory_mib=98304)
    cluster.add_nodes([NodeGroup(future, 1)], prefix="kwok-unknown")
    apply(cluster, namespace, isvc("proto", products=["X900"]))
    cond = wait_condition(cluster, namespace, "proto", "HardwareResolved", "True",
                          "UnknownGPUProduct")
    assert "conservative" in cond["message"]
    wait_event(cluster, namespace, "proto", "UnknownGPUProduct", "Warning")
    hw = get_isvc(cluster, namespace, "proto")["status"]["hardware"]
    assert hw["computeCapability"] == "9.0"
