"""The planner's own rules: input checks, GPU sharing, generated options, estimates, notes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slo_operator.engine import DEFAULT_GPU_MEMORY_UTILIZATION, EnginePlan
from slo_operator.engine.plan import MIN_CUDA_CC, plan_engine
from slo_operator.engine.types import BatchBounds, EngineError, EnginePrefs, GpuSharing, ModelFacts
from slo_operator.hardware import HardwareClass
from tests.support.hardware import hw

H100 = hw("H100")
A100 = hw("A100-80GB")
NAME = H100.display_name


def m(size: float | None = 8.0, **kw: object) -> ModelFacts:
    return ModelFacts(name="m", params_billion=size, **kw)  # type: ignore[arg-type]


def plan(model: ModelFacts | None = None, prefs: EnginePrefs | None = None,
         batch: BatchBounds | None = None, sharing: GpuSharing | None = None,
         hardware: HardwareClass = H100, gpus: int = 8) -> EnginePlan:
    return plan_engine(hardware, gpus, model or m(), prefs or EnginePrefs(),
                       batch or BatchBounds(), sharing)


def refusal(**kw: object) -> EngineError:
    with pytest.raises(EngineError) as err:
        plan(**kw)  # type: ignore[arg-type]
    return err.value


def arg(p: EnginePlan, flag: str) -> str | None:
    return p.args[p.args.index(flag) + 1] if flag in p.args else None


def notes(p: EnginePlan, reason: str) -> list[str]:
    return [n.message for n in p.notes if n.reason == reason]


def test_defaults() -> None:
    assert DEFAULT_GPU_MEMORY_UTILIZATION == 0.90
    assert MIN_CUDA_CC == (7, 0)


@pytest.mark.parametrize(("kw", "field", "message"), [
    ({"hardware": replace(H100, memory_gib=0.0)}, "spec.hardware.gpuProducts",
     f"GPU memory of {NAME} is unknown (no nvidia.com/gpu.memory or amd.com/gpu.vram label and "
     "not in the catalogue); pick a known GPU product"),
    ({"hardware": replace(H100, compute_capability=(6, 9))}, "spec.hardware.gpuProducts",
     f"{NAME} has compute capability 6.9; vLLM needs 7.0 or newer"),
    ({"gpus": 0}, "spec.hardware.gpusPerReplica", "need at least one GPU per replica, got 0"),
    ({"model": ModelFacts(name="-m", params_billion=8)}, "spec.model.name",
     "'-m' must not be empty or start with '-'"),
    ({"model": ModelFacts(name="", params_billion=8)}, "spec.model.name",
     "'' must not be empty or start with '-'"),
    ({"model": ModelFacts(name="  ", params_billion=8)}, "spec.model.name",
     "'  ' must not be empty or start with '-'"),
    ({"model": m(served_name="-s")}, "spec.model.servedName",
     "'-s' must not be empty or start with '-'"),
    ({"model": m(served_name=" ")}, "spec.model.servedName",
     "' ' must not be empty or start with '-'"),
    ({"model": m(None)}, "spec.model.sizeBillions",
     "model size is needed to plan tensor parallelism and KV-cache memory"),
    ({"model": m(0.0)}, "spec.model.sizeBillions", "model size must be positive, got 0.0"),
    ({"model": m(-1.0)}, "spec.model.sizeBillions", "model size must be positive, got -1.0"),
    ({"model": m(max_model_len=0)}, "spec.model.maxModelLen", "must be positive, got 0"),
    ({"batch": BatchBounds(min_seqs=0, max_seqs=8)}, "spec.batching.minBatch",
     "must be at least 1, got 0"),
    ({"batch": BatchBounds(min_seqs=8, max_seqs=7)}, "spec.batching.maxBatch",
     "7 is below the minimum batch 8"),
    ({"prefs": EnginePrefs(gpu_memory_utilization=0.0)}, "spec.engine.gpuMemoryUtilization",
     "must be in (0, 1], got 0.0"),
    ({"prefs": EnginePrefs(gpu_memory_utilization=1.01)}, "spec.engine.gpuMemoryUtilization",
     "must be in (0, 1], got 1.01"),
])
def test_input_checks(kw: dict[str, object], field: str, message: str) -> None:
    err = refusal(**kw)
    assert (err.field, err.message) == (field, message)


@pytest.mark.parametrize("kw", [
    {"hardware": replace(H100, compute_capability=(7, 0))},
    {"hardware": replace(H100, compute_capability=None)},
    {"hardware": replace(hw("MI300X"), compute_capability=(6, 0))},
    {"gpus": 1},
    {"model": m(served_name=None)},
    {"model": m(0.001)},
    {"model": m(max_model_len=1)},
    {"batch": BatchBounds(min_seqs=1, max_seqs=1)},
    {"batch": BatchBounds(min_seqs=8, max_seqs=8)},
    {"prefs": EnginePrefs(gpu_memory_utilization=1.0)},
    {"prefs": EnginePrefs(gpu_memory_utilization=0.5)},
])
def test_inputs_at_the_limits_plan(kw: dict[str, object]) -> None:
    assert plan(**kw).tensor_parallel_size >= 1  # type: ignore[arg-type]


def test_memory_fraction_reaches_the_options() -> None:
    assert arg(plan(), "--gpu-memory-utilization") == "0.9"
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=1.0))
    assert (p.gpu_memory_utilization, arg(p, "--gpu-memory-utilization")) == (1.0, "1")
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=0.85))
    assert (p.gpu_memory_utilization, arg(p, "--gpu-memory-utilization")) == (0.85, "0.85")


@pytest.mark.parametrize(("replicas", "want"), [
    (2, 0.45), (3, 0.3), (4, 0.225), (7, 0.128), (9, 0.1), (17, 0.052), (18, 0.05), (36, 0.025),
])
def test_time_sliced_share_is_rounded_down(replicas: int, want: float) -> None:
    h200 = hw("H200")
    p = plan(model=m(0.5, max_model_len=1024), hardware=h200,
             sharing=GpuSharing(replicas=replicas))
    assert p.gpu_memory_utilization == want
    assert arg(p, "--gpu-memory-utilization") == f"{want:g}"
    assert notes(p, "SharedGPU") == [
        f"{h200.display_name} is time-sliced {replicas} ways: latency is not isolated from "
        f"other pods on the GPU; vLLM gets --gpu-memory-utilization {want:g} (its share of the "
        "memory) and tensor parallel 1"]
    assert notes(p, "SharedGPUMemory") == []
    assert notes(p, "MIGSlice") == []


@pytest.mark.parametrize(("gmu", "warned"), [(0.5, False), (0.51, True), (0.3, False)])
def test_user_memory_fraction_on_a_shared_gpu(gmu: float, warned: bool) -> None:
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=gmu), sharing=GpuSharing(replicas=2))
    assert p.gpu_memory_utilization == gmu
    want = [f"{gmu:g} of the GPU's memory is more than a 1/2 share; other pods on the same GPU "
            "may fail to start"]
    assert notes(p, "SharedGPUMemory") == (want if warned else [])
    assert [n.field for n in p.notes if n.reason.startswith("SharedGPU")] == (
        ["spec.engine.gpuMemoryUtilization"] * (2 if warned else 1))


def test_whole_gpus_get_no_sharing_notes() -> None:
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=0.95))
    assert p.gpu_memory_utilization == 0.95
    assert not [n for n in p.notes if n.reason in ("SharedGPU", "SharedGPUMemory", "MIGSlice")]


def test_mig_slice_note_and_memory() -> None:
    p = plan(hardware=replace(H100, memory_gib=19.25), sharing=GpuSharing(mig=True),
             model=m(1.0))
    assert p.tensor_parallel_size == 1
    assert p.gpu_memory_utilization == 0.9
    assert [(n.field, n.message) for n in p.notes if n.reason == "MIGSlice"] == [(
        "spec.engine.tensorParallelSize",
        f"{NAME} is a MIG slice: planned with the slice's 19.2 GiB and tensor parallel 1 "
        "(no tensor parallelism across MIG instances)")]
    assert notes(p, "SharedGPU") == []


MIG_REASON = (f"{NAME} is a MIG slice; vLLM cannot run tensor parallel across MIG instances "
              "(NCCL has no peer-to-peer path between them): use 1, or a larger MIG profile or "
              "whole GPUs")
SLICED_REASON = (f"{NAME} is time-sliced 2 ways; tensor-parallel ranks could share one physical "
                 "GPU: use 1, or whole GPUs")


@pytest.mark.parametrize(("sharing", "reason"), [
    (GpuSharing(mig=True), MIG_REASON), (GpuSharing(replicas=2), SLICED_REASON),
])
def test_no_tensor_parallel_on_shared_gpus(sharing: GpuSharing, reason: str) -> None:
    err = refusal(prefs=EnginePrefs(tensor_parallel_size=2,
                                    tensor_parallel_source="spec.hardware.gpusPerReplica"),
                  sharing=sharing)
    assert (err.field, err.message) == ("spec.hardware.gpusPerReplica", f"2: {reason}")
    one = plan(prefs=EnginePrefs(tensor_parallel_size=1), sharing=sharing)
    assert one.tensor_parallel_size == 1
    assert plan(sharing=sharing).tensor_parallel_size == 1


@pytest.mark.parametrize(("sharing", "reason"), [
    (GpuSharing(mig=True), MIG_REASON), (GpuSharing(replicas=2), SLICED_REASON),
])
def test_too_big_for_a_shared_gpu_says_why_no_tp(sharing: GpuSharing, reason: str) -> None:
    err = refusal(model=m(70.0), sharing=sharing)
    assert err.field == "spec.hardware.gpusPerReplica"
    assert err.message.endswith(f" ({reason})")
    assert "the pool offers 1:" in err.message


def test_too_big_for_whole_gpus_names_no_sharing() -> None:
    err = refusal(model=m(70.0), gpus=1)
    assert err.field == "spec.hardware.gpusPerReplica"
    assert "the pool offers 1:" in err.message
    assert not err.message.endswith(")")
    assert "MIG" not in err.message and "time-sliced" not in err.message


def test_whole_gpus_shard_up_to_the_pool() -> None:
    assert plan(model=m(70.0), hardware=A100).tensor_parallel_size == 2
    # More GPUs than any TP size considered behave like the largest one.
    assert plan(model=m(1000.0), gpus=100).tensor_parallel_size == 16


def test_generated_options_follow_the_model() -> None:
    bare = plan()
    assert "--served-model-name" not in bare.args
    assert "--max-model-len" not in bare.args
    assert bare.max_model_len is None
    named = plan(model=m(served_name="short", max_model_len=4096))
    assert arg(named, "--served-model-name") == "short"
    assert arg(named, "--max-model-len") == "4096"
    assert named.max_model_len == 4096


def test_generated_options_without_quantization() -> None:
    p = plan(hardware=A100)
    assert p.quantization is None and "--quantization" not in p.args
    assert p.args[:8] == ("--model", "m", "--dtype", "bfloat16", "--kv-cache-dtype", "auto",
                          "--tensor-parallel-size", "1")
    assert arg(p, "--max-num-seqs") == "256"
    assert arg(p, "--max-num-batched-tokens") == "2048"


def test_generated_options_with_quantization() -> None:
    p = plan()
    assert p.args[:10] == ("--model", "m", "--dtype", "bfloat16", "--quantization", "fp8",
                           "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "1")
    assert p.env == ()
    assert p.conflicts == ()
    assert isinstance(p.args, tuple) and isinstance(p.notes, tuple)


def test_estimated_shape_note() -> None:
    p = plan(model=m(70.0), hardware=A100)
    assert [(n.field, n.message) for n in p.notes if n.reason == "EstimatedShape"] == [(
        "spec.model.sizeBillions",
        "KV sizing estimated from 70B parameters: 80 layers, 8 KV heads of 128 (Llama-family "
        "shape); set numLayers, numKVHeads and headDim for an exact figure")]
    exact = plan(model=m(8.0, num_layers=32, num_kv_heads=8, head_dim=128))
    assert notes(exact, "EstimatedShape") == []
    partly = plan(model=m(8.0, num_layers=32, num_kv_heads=8))
    assert notes(partly, "EstimatedShape") != []


@pytest.mark.parametrize(("hardware", "model", "desc"), [
    (A100, m(8.0), "16-bit"), (H100, m(8.0), "8-bit"),
    (A100, m(8.0, quantized_checkpoint="awq"), "4-bit"),
])
def test_weight_width_in_the_tp_note(hardware: HardwareClass, model: ModelFacts,
                                     desc: str) -> None:
    (msg,) = notes(plan(model=model, hardware=hardware), "SmallestFittingTP")
    assert msg.startswith(f"TP 1: smallest size where {desc} weights (")


def test_estimates_are_rounded_to_hundredths() -> None:
    p = plan()
    # 8B at 8 bits: 8e9 x 1.10 bytes = 8.196 GiB; 72 GiB budget - 1.5 overhead - weights.
    assert p.est_weight_gib_per_gpu == 8.2
    assert p.est_kv_gib_per_gpu == 62.3
    assert p.est_max_concurrent_seqs == 124


@pytest.mark.parametrize(("max_seqs", "limited"), [(123, False), (124, False), (125, True)])
def test_kv_limit_note_boundary(max_seqs: int, limited: bool) -> None:
    p = plan(batch=BatchBounds(max_seqs=max_seqs))
    want = [f"KV memory holds about 124 sequences of 8192 tokens, below --max-num-seqs "
            f"{max_seqs}; longer batches will queue or preempt"]
    assert notes(p, "KVCacheLimited") == (want if limited else [])
    assert [n.field for n in p.notes if n.reason == "KVCacheLimited"] == (
        ["spec.batching.maxBatch"] if limited else [])


def test_estimates_follow_an_added_context_length() -> None:
    # --max-model-len is not generated without spec.model.maxModelLen: no conflict, yet the
    # effective context is the user's and the estimates must use it.
    spec = plan(model=m(max_model_len=65536))
    extra = plan(prefs=EnginePrefs(extra_args=("--max-model-len", "65536")))
    assert extra.conflicts == ()
    assert extra.max_model_len == 65536
    assert extra.est_max_concurrent_seqs == spec.est_max_concurrent_seqs == 15
    assert notes(extra, "KVCacheLimited") == notes(spec, "KVCacheLimited") == [
        "KV memory holds about 15 sequences of 65536 tokens, below --max-num-seqs 256; longer "
        "batches will queue or preempt"]


def test_estimates_follow_added_quantization() -> None:
    base = plan(model=m(70.0), hardware=A100)
    fp8 = plan(model=m(70.0), hardware=A100, prefs=EnginePrefs(extra_args=("--quantization",
                                                                            "fp8")))
    assert fp8.conflicts == () and fp8.quantization == "fp8"
    assert fp8.tensor_parallel_size == base.tensor_parallel_size == 2
    assert fp8.est_weight_gib_per_gpu == 35.86 < base.est_weight_gib_per_gpu == 66.5


def test_context_auto_override_sizes_for_the_default_window() -> None:
    p = plan(model=m(max_model_len=65536), prefs=EnginePrefs(extra_args=("--max-model-len",
                                                                         "auto")))
    assert p.max_model_len is None
    assert p.est_max_concurrent_seqs == plan().est_max_concurrent_seqs == 124


def test_estimates_follow_a_memory_override_at_tp_one() -> None:
    p = plan(prefs=EnginePrefs(extra_args=("--gpu-memory-utilization", "0.5")))
    assert p.tensor_parallel_size == 1
    # 40 GiB - 8.2 weights - 1.5 overhead.
    assert (p.est_weight_gib_per_gpu, p.est_kv_gib_per_gpu) == (8.2, 30.3)
    assert notes(p, "OverrideMayNotFit") == []


def test_an_override_that_may_not_fit_is_noted() -> None:
    p = plan(prefs=EnginePrefs(extra_args=("--gpu-memory-utilization", "0.1")))
    assert [(n.field, n.message) for n in p.notes if n.reason == "OverrideMayNotFit"] == [(
        "spec.engine.extraArgs",
        "with the extra args the model may not fit: 8.2 GiB weights and 0.0 GiB KV per GPU")]
    assert p.est_kv_gib_per_gpu == 0.0 and p.est_max_concurrent_seqs == 0


def test_an_override_fits_only_with_room_for_the_minimum_batch() -> None:
    # 0.3 x 80 = 24 GiB - 8.2 - 1.5 leaves about 14.3 GiB: 28 sequences of 8192 tokens.
    extra = EnginePrefs(extra_args=("--gpu-memory-utilization", "0.3"))
    roomy = plan(prefs=extra, batch=BatchBounds(min_seqs=28))
    assert roomy.est_max_concurrent_seqs == 28
    assert notes(roomy, "OverrideMayNotFit") == []
    tight = plan(prefs=extra, batch=BatchBounds(min_seqs=29))
    assert notes(tight, "OverrideMayNotFit") != []


def test_same_value_override_changes_no_estimate() -> None:
    p = plan(prefs=EnginePrefs(extra_args=("--gpu-memory-utilization", "0.9")))
    assert len(p.conflicts) == 1
    base = plan()
    assert (p.est_weight_gib_per_gpu, p.est_kv_gib_per_gpu, p.est_max_concurrent_seqs) == (
        base.est_weight_gib_per_gpu, base.est_kv_gib_per_gpu, base.est_max_concurrent_seqs)


@pytest.mark.parametrize("memory", [1.0, 0.5])
def test_small_known_memory_is_not_unknown(memory: float) -> None:
    err = refusal(hardware=replace(H100, memory_gib=memory), model=m(0.001))
    assert err.field == "spec.model.sizeBillions"
    assert f"({memory:.1f} GiB x 0.9)" in err.message
