"""The pod the operator renders is one the in-pod runtime can start: env names, args, ports.

Both packages are imported here on purpose: this is the contract between them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.reconcile.desired import ServicePlan, plan_service, pool_from_product
from slo_operator.render.objects import GATEWAY_PORT, build_deployment
from slo_runtime.launch import read_env, run_launch
from slo_runtime.probe import GpuInfo

GPUS = {
    "H100": GpuInfo("nvidia", "NVIDIA H100 80GB HBM3", "9.0", 81559, 8, "test"),
    "A100": GpuInfo("nvidia", "NVIDIA A100-SXM4-40GB", "8.0", 40960, 8, "test"),
    "T4": GpuInfo("nvidia", "Tesla T4", "7.5", 15360, 8, "test"),
}


def _pod(product: str, precision: str = "auto") -> dict[str, Any]:
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
    vllm = _pod(product)["containers"][0]
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


def test_fp8_plan_falls_back_loudly_on_a_gpu_without_fp8(tmp_path: Path) -> None:
    vllm = _pod("H100")["containers"][0]
    env = {**_env(vllm), "SLO_PROBE_FILE": str(tmp_path / "probe.json")}
    execs: list[list[str]] = []
    # The labels promised an H100, but the pod landed on an A100 (mislabelled node).
    plan = run_launch(env, gpu=GPUS["A100"], exec_fn=lambda f, argv: execs.append(argv))
    assert "--quantization" not in execs[0]
    assert plan.changes, "fallback must be reported"
    assert json.loads((tmp_path / "probe.json").read_text())["matches"] is False


def test_explicit_fp8_request_is_forced_in_the_launcher() -> None:
    assert _env(_pod("H100", "fp8")["containers"][0])["SLO_FP8_POLICY"] == "force"
    assert _env(_pod("H100")["containers"][0])["SLO_FP8_POLICY"] == "auto"


def test_probes_and_launcher_listen_where_the_gateway_forwards() -> None:
    pod = _pod("H100")
    vllm, gateway = pod["containers"]
    cfg = read_env(_env(vllm))
    assert f"http://127.0.0.1:{cfg['port']}" in gateway["command"]
    assert str(GATEWAY_PORT) in gateway["command"]
    assert vllm["readinessProbe"]["httpGet"]["port"] == GATEWAY_PORT
