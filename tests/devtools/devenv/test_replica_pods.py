"""The replica harness's reading of pods: rendered pod templates in, replica settings out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from slo_devtools.devenv.replica_pods import (
    DEFAULT_GRACE_S,
    drain,
    packaged_profiles,
    pod_hardware,
    pod_is_serving,
    pod_replica,
    shape_for,
    step_model,
)
from slo_operator.hardware import resolve_product
from slo_operator.render.objects import PRE_STOP_SLEEP_S, RenderInput, build_deployment
from slo_runtime import contract

PROFILES = packaged_profiles()


def rendered_pod(args: list[str], *, gpu: str = "NVIDIA-H200", limit: str | None = "32",
                 phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    """A pod as the Deployment the operator renders would create it."""
    dep = build_deployment(RenderInput(
        name="chat", namespace="team-a", uid="u1", engine_image="vllm/vllm-openai:v0.32.0",
        runtime_image="slo-runtime:dev", engine_args=args, gpu_product=gpu,
        tenant="acme", policy="gold"))
    tmpl = dep["spec"]["template"]
    meta = {**tmpl["metadata"], "name": "chat-abc", "namespace": "team-a",
            "annotations": dict(tmpl["metadata"].get("annotations") or {})}
    if limit is not None:
        meta["annotations"][contract.ANNOTATION_INFLIGHT_LIMIT] = limit
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T18:00:00Z"
    return {"metadata": meta, "spec": tmpl["spec"], "status": {"phase": phase}}


def test_reads_labels_limit_and_engine_args_of_a_rendered_pod() -> None:
    pod = rendered_pod(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--quantization", "fp8",
                        "--kv-cache-dtype", "fp8", "--max-num-seqs", "128",
                        "--max-num-batched-tokens", "2048", "--served-model-name", "chat"])
    r = pod_replica(pod)
    assert (r.namespace, r.pod, r.service, r.tenant, r.policy) == \
        ("team-a", "chat-abc", "chat", "acme", "gold")
    assert (r.precision, r.kv_cache_dtype, r.max_num_seqs, r.max_num_batched_tokens) == \
        ("fp8", "fp8", 128, 2048)
    assert r.model_name == "chat"
    assert r.limit == 32


def test_a_pods_grace_period_is_its_own_or_kubernetes_default() -> None:
    pod = rendered_pod(["--model", "m"])
    assert pod_replica(pod).grace_s == pod["spec"]["terminationGracePeriodSeconds"]
    del pod["spec"]["terminationGracePeriodSeconds"]
    assert pod_replica(pod).grace_s == DEFAULT_GRACE_S


def test_a_pods_pre_stop_sleep_is_the_longest_of_its_containers() -> None:
    pod = rendered_pod(["--model", "m"])
    assert pod_replica(pod).pre_stop_s == PRE_STOP_SLEEP_S
    pod["spec"]["containers"][1]["lifecycle"] = {"preStop": {"sleep": {"seconds": 9}}}
    assert pod_replica(pod).pre_stop_s == 9
    for c in pod["spec"]["containers"]:
        c["lifecycle"] = {"preStop": {"exec": {"command": ["true"]}}}
    assert pod_replica(pod).pre_stop_s == 0.0


class Runner:
    """Stands for an aiohttp runner: when its cleanup ran (loop time)."""

    def __init__(self) -> None:
        self.stopped: float | None = None

    async def cleanup(self) -> None:
        self.stopped = asyncio.get_running_loop().time()


def _drained(busy_for: float, grace_s: float, stop_after: float | None = None,
             pre_stop_s: float = 0.0) -> float:
    """Seconds from the deletion to the servers' stop, with requests in flight for
    ``busy_for`` seconds; the harness stops after ``stop_after`` seconds (None: never)."""
    async def run() -> float:
        loop = asyncio.get_running_loop()
        start, runner, stop = loop.time(), Runner(), asyncio.Event()
        if stop_after is not None:
            loop.call_later(stop_after, stop.set)
        await drain(lambda: loop.time() - start < busy_for, [runner],  # type: ignore[list-item]
                    grace_s, stop, poll_s=0.01, pre_stop_s=pre_stop_s)
        assert runner.stopped is not None
        return runner.stopped - start

    return asyncio.run(run())


def test_a_deleted_pods_servers_stop_once_its_requests_finish_within_its_grace() -> None:
    assert 0.2 <= _drained(busy_for=0.2, grace_s=30.0) < 30.0


def test_a_deleted_pods_servers_stop_at_the_end_of_its_grace_with_requests_left() -> None:
    assert 0.2 <= _drained(busy_for=600.0, grace_s=0.2) < 600.0


def test_stopping_the_harness_stops_a_draining_pods_servers_at_once() -> None:
    assert 0.1 <= _drained(busy_for=600.0, grace_s=600.0, stop_after=0.1) < 600.0
    assert 0.1 <= _drained(busy_for=0.0, grace_s=600.0, stop_after=0.1, pre_stop_s=600.0) \
        < 600.0


def test_an_idle_deleted_pod_serves_on_through_its_pre_stop_sleep_within_its_grace() -> None:
    assert 0.3 <= _drained(busy_for=0.0, grace_s=30.0, pre_stop_s=0.3) < 30.0
    assert 0.2 <= _drained(busy_for=0.0, grace_s=0.2, pre_stop_s=600.0) < 600.0


@pytest.mark.parametrize(("args", "want_precision"), [
    (["--model", "m"], "bf16"),
    (["--model", "m", "--dtype", "float16"], "fp16"),
    (["--model", "m", "-q", "fp8_per_block"], "fp8"),
    (["--model", "m", "--quantization", "awq"], "bf16"),
])
def test_precision_follows_the_quantization_method(args: list[str], want_precision: str) -> None:
    assert pod_replica(rendered_pod(args)).precision == want_precision


def test_missing_or_bad_limit_annotation_reads_as_none() -> None:
    assert pod_replica(rendered_pod(["--model", "m"], limit=None)).limit is None
    assert pod_replica(rendered_pod(["--model", "m"], limit="lots")).limit is None


@pytest.mark.parametrize(("phase", "deleting", "want"), [
    ("Running", False, True), ("Pending", False, False), ("Running", True, False),
    ("Succeeded", False, False),
])
def test_only_running_pods_not_being_deleted_serve(phase: str, deleting: bool,
                                                   want: bool) -> None:
    assert pod_is_serving(rendered_pod(["--model", "m"], phase=phase,
                                       deleting=deleting)) is want


def test_gpu_from_node_labels_first_then_pod_label() -> None:
    pod = rendered_pod(["--model", "m"], gpu="NVIDIA-H200")
    hw = pod_hardware(pod, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                            "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
                            "nvidia.com/gpu.compute.major": "9",
                            "nvidia.com/gpu.compute.minor": "0"})
    assert hw is not None and "H100" in hw.product
    hw = pod_hardware(pod, None)
    assert hw is not None and "H200" in hw.product


@pytest.mark.parametrize(("model", "want"), [
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("mistralai/Mistral-7B", "llama-3.1-8b"),
])
def test_model_shape_from_the_model_name(model: str, want: str) -> None:
    assert shape_for(model, PROFILES) == want


def test_step_model_moves_to_the_pods_gpu_and_precision() -> None:
    h200 = resolve_product("H200").hardware
    h100 = resolve_product("H100-80GB").hardware
    l4 = resolve_product("L4").hardware
    r = pod_replica(rendered_pod(["--model", "meta-llama/Llama-3.1-8B-Instruct"]))
    r8 = pod_replica(rendered_pod(["--model", "meta-llama/Llama-3.1-8B-Instruct", "-q", "fp8"]))
    on_h200 = step_model(r, h200, PROFILES)
    on_h100 = step_model(r, h100, PROFILES)
    on_l4 = step_model(r, l4, PROFILES)
    # The H200 profile itself, unscaled, on an H200.
    assert on_h200.decode_ms(64) == pytest.approx(
        next(p for p in PROFILES if p["shape"] == "llama-3.1-8b" and p["ctx"] == 1024)
        ["decode_ms"]["bf16"]["64"])
    assert on_h200.decode_ms(64) < on_h100.decode_ms(64) < on_l4.decode_ms(64)
    assert on_l4.kv_capacity_tokens < on_h100.kv_capacity_tokens < on_h200.kv_capacity_tokens
    assert step_model(r8, h200, PROFILES).decode_ms(64) < on_h200.decode_ms(64)
    fast = step_model(r, h200, PROFILES, speed=10)
    assert fast.decode_ms(64) == pytest.approx(on_h200.decode_ms(64) / 10)
