"""The whole planner: hardware class + model + preferences -> vLLM options, notes, estimates.

Module rules are tested with their modules (precision, parallel, batching, overrides); here
they are composed: input checks, GPU sharing, the generated options, estimates after the
user's overrides, and every plan of the catalogue against the captured vLLM parser.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import yaml

from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec
from slo_operator.engine import (
    KV_CACHE_DTYPES,
    PRECISIONS,
    BatchBounds,
    ChunkBudget,
    EngineError,
    EnginePlan,
    EnginePrefs,
    GpuSharing,
    ModelFacts,
    VllmArgSpec,
    plan_engine,
)
from slo_operator.hardware import HardwareClass, classify_node, load_catalogue
from slo_operator.reconcile.desired import (
    NodeInfo,
    Problem,
    ServicePlan,
    discover_pools,
    plan_service,
)
from tests.support.golden import Golden
from tests.support.hardware import hw
from tests.support.paths import FIXTURES, NODE_LABELS

SERVE_ARGS = FIXTURES / "vllm" / "serve-args-vllm-0.32.0.json"
H100 = hw("H100")
A100 = hw("A100-80GB")
F_TP = "spec.engine.tensorParallelSize"
F_GPUS = "spec.hardware.gpusPerReplica"
F_GMU = "spec.engine.gpuMemoryUtilization"
F_SIZE = "spec.model.sizeBillions"
F_PRODUCTS = "spec.hardware.gpuProducts"


def case_id(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.id)


def model(size: float | None = 8.0, **kw: object) -> ModelFacts:
    return ModelFacts(name="meta-llama/Llama-3.1-8B-Instruct", params_billion=size, **kw)  # type: ignore[arg-type]


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


def extra(*args: str) -> EnginePrefs:
    return EnginePrefs(extra_args=args)


# ------------------------------------------------------------------ the rules, composed


@dataclass(frozen=True)
class Case:
    id: str
    product: str
    model: ModelFacts
    prefs: EnginePrefs = field(default_factory=EnginePrefs)
    gpus: int = 8
    batch: BatchBounds = field(default_factory=BatchBounds)
    want_dtype: str | None = None
    want_quantization: str | None = "<any>"
    want_kv: str | None = None
    want_tp: int | None = None
    want_tp_at_least: int | None = None
    want_note: str | None = None
    want_error_field: str | None = None


NO_Q = EnginePrefs(allow_quantization=False)
CASES = [
    Case("8b-on-h100-auto-picks-fp8-weights-and-fp8-kv", "H100", model(8),
         want_dtype="bfloat16", want_quantization="fp8", want_kv="fp8", want_tp=1,
         want_note="FP8Native"),
    Case("8b-on-a100-stays-bf16-without-quantization", "A100-80GB", model(8),
         want_dtype="bfloat16", want_quantization=None, want_kv="auto", want_tp=1,
         want_note="NoFP8KVCache"),
    Case("8b-on-t4-uses-half-and-needs-two-gpus", "T4", model(8), want_dtype="half",
         want_quantization=None, want_kv="auto", want_tp=2, want_note="NoBF16"),
    Case("70b-on-a100-80gb-x8-shards", "A100-80GB", model(70), want_tp_at_least=2),
    Case("70b-on-h200-with-fp8-fits-one-gpu", "H200", model(70), EnginePrefs(precision="fp8"),
         want_quantization="fp8", want_tp=1),
    Case("70b-on-h200-without-quantization-needs-two", "H200", model(70), NO_Q,
         want_quantization=None, want_kv="auto", want_tp=2, want_note="NoFP8"),
    Case("explicit-fp8-on-ampere-is-weight-only-marlin", "A100-80GB", model(8),
         EnginePrefs(precision="fp8"), want_quantization="fp8", want_kv="auto",
         want_note="FP8WeightOnly"),
    Case("explicit-fp8-on-turing-rejected", "T4", model(8), EnginePrefs(precision="fp8"),
         want_error_field="spec.engine.precision"),
    Case("explicit-bf16-on-turing-rejected", "T4", model(8), EnginePrefs(precision="bf16"),
         want_error_field="spec.engine.precision"),
    Case("explicit-bf16-on-volta-rejected", "V100", model(1), EnginePrefs(precision="bf16"),
         want_error_field="spec.engine.precision"),
    Case("explicit-fp16-on-hopper-keeps-fp8-kv", "H100", model(8), EnginePrefs(precision="fp16"),
         want_dtype="half", want_quantization=None, want_kv="fp8"),
    Case("explicit-fp8-on-mi250x-rejected-no-marlin-on-rocm", "MI250X", model(8),
         EnginePrefs(precision="fp8"), want_error_field="spec.engine.precision"),
    Case("mi300x-auto-fp8-with-rocm-kv-spelling", "MI300X", model(70), want_quantization="fp8",
         want_kv="fp8_e4m3", want_tp=1),
    Case("mi300x-kv-fp8-becomes-e4m3", "MI300X", model(8), EnginePrefs(kv_cache_dtype="fp8"),
         want_kv="fp8_e4m3"),
    Case("mi300x-kv-e5m2-rejected", "MI300X", model(8), EnginePrefs(kv_cache_dtype="fp8_e5m2"),
         want_error_field="spec.engine.kvCacheDtype"),
    Case("mi250x-kv-fp8-rejected", "MI250X", model(8), EnginePrefs(kv_cache_dtype="fp8"),
         want_error_field="spec.engine.kvCacheDtype"),
    Case("mi250x-auto-bf16-no-fp8", "MI250X", model(8), want_dtype="bfloat16",
         want_quantization=None, want_kv="auto"),
    Case("explicit-fp8-kv-on-ampere-kept-with-warning", "A100-80GB", model(8),
         EnginePrefs(kv_cache_dtype="fp8"), want_kv="fp8", want_note="FP8KVCacheRisk"),
    Case("h100-kv-e5m2-allowed-on-cuda", "H100", model(8),
         EnginePrefs(kv_cache_dtype="fp8_e5m2"), want_kv="fp8_e5m2"),
    Case("h100-kv-bf16-explicit", "H100", model(8), EnginePrefs(kv_cache_dtype="bf16"),
         want_kv="bfloat16"),
    Case("t4-kv-bf16-rejected", "T4", model(1), EnginePrefs(kv_cache_dtype="bf16"),
         want_error_field="spec.engine.kvCacheDtype"),
    Case("kv-fp8-when-quantization-forbidden-rejected", "H100", model(8),
         EnginePrefs(kv_cache_dtype="fp8", allow_quantization=False),
         want_error_field="spec.engine.kvCacheDtype"),
    Case("precision-fp8-when-quantization-forbidden-rejected", "H100", model(8),
         EnginePrefs(precision="fp8", allow_quantization=False),
         want_error_field="spec.engine.precision"),
    Case("gaudi2-without-calibration-stays-bf16", "Gaudi2", model(8), want_dtype="bfloat16",
         want_quantization=None, want_kv="auto", want_note="NoCalibration"),
    Case("gaudi3-with-calibration-uses-inc", "Gaudi3", model(70),
         EnginePrefs(quant_config="/calib/maxabs_quant.json"), want_quantization="inc",
         want_kv="fp8_inc", want_tp=1),
    Case("gaudi2-explicit-fp8-without-calibration-rejected", "Gaudi2", model(8),
         EnginePrefs(precision="fp8"), want_error_field="spec.engine.precision"),
    Case("model-size-missing", "H100", model(None), want_error_field=F_SIZE),
    Case("405b-on-one-l4-asks-for-more-gpus-per-replica", "L4", model(405), gpus=1,
         want_error_field=F_GPUS),
    Case("absurd-model-does-not-fit-anywhere", "T4", model(5000), want_error_field=F_SIZE),
    Case("explicit-tp-above-pool", "H100", model(8), EnginePrefs(tensor_parallel_size=16),
         want_error_field=F_TP),
    Case("explicit-tp-too-small-for-70b-bf16", "A100-80GB", model(70),
         EnginePrefs(tensor_parallel_size=1), want_error_field=F_TP),
    Case("explicit-tp-must-divide-kv-heads", "H100", model(8, num_kv_heads=8),
         EnginePrefs(tensor_parallel_size=3), want_error_field=F_TP),
    Case("explicit-tp-honoured", "H100", model(8), EnginePrefs(tensor_parallel_size=4),
         want_tp=4),
    Case("70b-bf16-on-l4-needs-all-eight", "L4", model(70, num_kv_heads=8),
         EnginePrefs(allow_quantization=False), want_tp=8),
    Case("auto-tp-never-picks-a-size-that-splits-kv-heads", "L4", model(70, num_kv_heads=20),
         EnginePrefs(allow_quantization=False), want_error_field=F_TP),
    Case("explicit-non-power-of-two-tp-dividing-heads", "L4", model(70, num_kv_heads=20),
         EnginePrefs(allow_quantization=False, tensor_parallel_size=5),
         want_error_field=F_TP),
    Case("kv-heads-4-allow-tp-8-by-replication", "L4", model(70, num_kv_heads=4),
         EnginePrefs(allow_quantization=False), want_tp=8),
    Case("batched-tokens-below-max-seqs-rejected", "H100", model(8),
         EnginePrefs(max_num_batched_tokens=128),
         want_error_field="spec.engine.maxNumBatchedTokens"),
    Case("gpu-memory-utilization-out-of-range", "H100", model(8),
         EnginePrefs(gpu_memory_utilization=1.5), want_error_field=F_GMU),
    Case("awq-checkpoint-passes-no-quantization-flag", "H100",
         model(70, quantized_checkpoint="awq"), want_quantization=None, want_tp=1,
         want_note="QuantizedCheckpoint"),
    Case("awq-checkpoint-cannot-be-fp8-requantized", "H100",
         model(70, quantized_checkpoint="awq"), EnginePrefs(precision="fp8"),
         want_error_field="spec.engine.precision"),
    Case("fp8-checkpoint-on-turing-rejected", "T4", model(8, quantized_checkpoint="fp8"),
         want_error_field="spec.model.quantizedCheckpoint"),
    Case("fp8-checkpoint-on-ampere-loads-weight-only-70b-needs-two", "A100-80GB",
         model(70, quantized_checkpoint="fp8"), want_quantization=None, want_tp=2),
    # The case: 70B with precision fp8 on A100-80GB is planned FP8 weight-only
    # (Marlin) and sized for 8-bit weights; the launcher keeps --quantization fp8 there
    # (slo_runtime.contract: weight-only FP8 on 8.0-8.8), so plan and pod agree.
    Case("70b-fp8-on-a100-80gb-weight-only-sized-8-bit", "A100-80GB",
         model(70, max_model_len=16384, num_layers=80, num_kv_heads=8, head_dim=128),
         EnginePrefs(precision="fp8"), batch=BatchBounds(min_seqs=16, max_seqs=128),
         want_dtype="bfloat16", want_quantization="fp8", want_kv="auto", want_tp=4,
         want_note="FP8WeightOnly"),
    Case("70b-fp8-on-h100-native", "H100",
         model(70, max_model_len=16384, num_layers=80, num_kv_heads=8, head_dim=128),
         EnginePrefs(precision="fp8"), batch=BatchBounds(min_seqs=16, max_seqs=128),
         want_dtype="bfloat16", want_quantization="fp8", want_kv="fp8", want_note="FP8Native"),
    Case("fp8-on-rtx-3090-weight-only", "RTX-3090", model(8), EnginePrefs(precision="fp8"),
         want_quantization="fp8", want_kv="auto", want_note="FP8WeightOnly"),
    Case("fp8-on-v100-rejected", "V100", model(1), EnginePrefs(precision="fp8"),
         want_error_field="spec.engine.precision"),
    Case("b200-auto-native-fp8", "B200", model(8), want_quantization="fp8", want_kv="fp8",
         want_note="FP8Native"),
    Case("mi210-bf16-explicit-allowed", "MI210", model(8), EnginePrefs(precision="bf16"),
         want_dtype="bfloat16", want_quantization=None),
    Case("mi300x-explicit-fp8-native", "MI300X", model(8), EnginePrefs(precision="fp8"),
         want_dtype="bfloat16", want_quantization="fp8", want_kv="fp8_e4m3",
         want_note="FP8Native"),
    Case("min-batch-above-max-batch", "H100", model(8),
         batch=BatchBounds(min_seqs=64, max_seqs=8), want_error_field="spec.batching.maxBatch"),
    Case("min-batch-zero", "H100", model(8), batch=BatchBounds(min_seqs=0, max_seqs=8),
         want_error_field="spec.batching.minBatch"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_rules(case: Case, golden: Golden) -> None:
    hardware = hw(case.product)
    if case.want_error_field is not None:
        with pytest.raises(EngineError) as err:
            plan_engine(hardware, case.gpus, case.model, case.prefs, case.batch)
        assert err.value.field == case.want_error_field, err.value.message
        golden.check("engine", f"plan-{case.id}", err.value.message)
        return
    p = plan_engine(hardware, case.gpus, case.model, case.prefs, case.batch)
    if case.want_dtype is not None:
        assert p.dtype == case.want_dtype
        assert arg(p, "--dtype") == case.want_dtype
    if case.want_kv is not None:
        assert p.kv_cache_dtype == case.want_kv
        assert arg(p, "--kv-cache-dtype") == case.want_kv
    if case.want_quantization != "<any>":
        assert p.quantization == case.want_quantization
        assert arg(p, "--quantization") == case.want_quantization
    if case.want_tp is not None:
        assert p.tensor_parallel_size == case.want_tp
    if case.want_tp_at_least is not None:
        assert p.tensor_parallel_size >= case.want_tp_at_least
    assert arg(p, "--tensor-parallel-size") == str(p.tensor_parallel_size)
    if case.want_note is not None:
        assert case.want_note in [n.reason for n in p.notes], p.notes


# ------------------------------------------------------------------ input checks


NAME = H100.display_name


@pytest.mark.parametrize(("kw", "want_field"), [
    pytest.param({"hardware": replace(H100, memory_gib=0.0)}, F_PRODUCTS,
                 id="gpu-memory-unknown"),
    pytest.param({"hardware": replace(H100, compute_capability=(6, 9))}, F_PRODUCTS,
                 id="compute-capability-below-7"),
    pytest.param({"gpus": 0}, F_GPUS, id="no-gpu-per-replica"),
    pytest.param({"model": ModelFacts(name="-m", params_billion=8)}, "spec.model.name",
                 id="model-name-starts-with-a-dash"),
    pytest.param({"model": ModelFacts(name="", params_billion=8)}, "spec.model.name",
                 id="model-name-empty"),
    pytest.param({"model": ModelFacts(name="  ", params_billion=8)}, "spec.model.name",
                 id="model-name-blank"),
    pytest.param({"model": m(served_name="-s")}, "spec.model.servedName",
                 id="served-name-starts-with-a-dash"),
    pytest.param({"model": m(served_name="--foo")}, "spec.model.servedName",
                 id="served-name-looks-like-an-option"),
    pytest.param({"model": m(served_name=" ")}, "spec.model.servedName",
                 id="served-name-blank"),
    pytest.param({"model": m(None)}, F_SIZE, id="model-size-missing"),
    pytest.param({"model": m(0.0)}, F_SIZE, id="model-size-zero"),
    pytest.param({"model": m(-1.0)}, F_SIZE, id="model-size-negative"),
    pytest.param({"model": m(max_model_len=0)}, "spec.model.maxModelLen", id="context-zero"),
    pytest.param({"batch": BatchBounds(min_seqs=0, max_seqs=8)}, "spec.batching.minBatch",
                 id="min-batch-zero"),
    pytest.param({"batch": BatchBounds(min_seqs=8, max_seqs=7)}, "spec.batching.maxBatch",
                 id="max-batch-below-min-batch"),
    pytest.param({"prefs": EnginePrefs(gpu_memory_utilization=0.0)}, F_GMU,
                 id="memory-fraction-zero"),
    pytest.param({"prefs": EnginePrefs(gpu_memory_utilization=1.01)}, F_GMU,
                 id="memory-fraction-above-one"),
])
def test_input_no_plan_can_serve_is_refused(kw: dict[str, object], want_field: str,
                                            golden: Golden,
                                            request: pytest.FixtureRequest) -> None:
    err = refusal(**kw)
    assert err.field == want_field
    golden.check("engine", f"plan-input-{case_id(request)}", err.message)


@pytest.mark.parametrize("kw", [
    pytest.param({"hardware": replace(H100, compute_capability=(7, 0))},
                 id="compute-capability-7-0"),
    pytest.param({"hardware": replace(H100, compute_capability=None)},
                 id="compute-capability-unknown"),
    pytest.param({"hardware": replace(hw("MI300X"), compute_capability=(6, 0))},
                 id="cuda-minimum-not-applied-to-amd"),
    pytest.param({"gpus": 1}, id="one-gpu"),
    pytest.param({"model": m(served_name=None)}, id="no-served-name"),
    pytest.param({"model": m(0.001)}, id="tiny-model"),
    pytest.param({"model": m(max_model_len=1)}, id="context-one"),
    pytest.param({"batch": BatchBounds(min_seqs=1, max_seqs=1)}, id="batch-of-one"),
    pytest.param({"batch": BatchBounds(min_seqs=8, max_seqs=8)}, id="min-equals-max-batch"),
    pytest.param({"prefs": EnginePrefs(gpu_memory_utilization=1.0)}, id="whole-gpu-memory"),
    pytest.param({"prefs": EnginePrefs(gpu_memory_utilization=0.5)}, id="half-gpu-memory"),
])
def test_inputs_at_the_limits_plan(kw: dict[str, object]) -> None:
    assert plan(**kw).tensor_parallel_size >= 1  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("labels", "want_memory_gib"),
    [
        pytest.param({"nvidia.com/gpu.product": "GeForce-GT-710",
                      "nvidia.com/gpu.compute.major": "3", "nvidia.com/gpu.compute.minor": "3",
                      "nvidia.com/gpu.memory": "2048"}, 2.0, id="old-gpu-from-labels"),
        pytest.param({"nvidia.com/gpu.product": "NVIDIA-H20", "nvidia.com/gpu.family": "hopper"},
                     0.0, id="gpu-without-memory-label"),
    ],
)
def test_node_labels_no_plan_can_serve_name_the_gpu_products(
    labels: dict[str, str], want_memory_gib: float, golden: Golden,
    request: pytest.FixtureRequest,
) -> None:
    res = classify_node(labels)
    assert res.hardware is not None and res.hardware.memory_gib == want_memory_gib
    with pytest.raises(EngineError) as err:
        plan_engine(res.hardware, 1, model(1), EnginePrefs(), BatchBounds())
    assert err.value.field == F_PRODUCTS
    golden.check("engine", f"plan-labels-{case_id(request)}", err.value.message)


@pytest.mark.parametrize("memory", [pytest.param(1.0, id="one-gib"),
                                    pytest.param(0.5, id="half-a-gib")])
def test_small_known_memory_is_not_unknown(memory: float, golden: Golden,
                                           request: pytest.FixtureRequest) -> None:
    err = refusal(hardware=replace(H100, memory_gib=memory), model=m(0.001))
    assert err.field == F_SIZE
    golden.check("engine", f"plan-small-memory-{case_id(request)}", err.message)


def test_hardware_class_is_not_mutated() -> None:
    h = hw("H100")
    before = replace(h)
    plan_engine(h, 8, model(8), EnginePrefs(), BatchBounds())
    assert h == before


# ------------------------------------------------------------------ generated options


def test_args_order_and_content() -> None:
    p = plan_engine(H100, 8, model(8, served_name="llama-8b", max_model_len=16384),
                    EnginePrefs(), BatchBounds(min_seqs=4, max_seqs=64, initial=32))
    flags = [a for a in p.args if a.startswith("--")]
    assert p.args[:2] == ("--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert flags == [
        "--model", "--served-model-name", "--dtype", "--quantization", "--kv-cache-dtype",
        "--tensor-parallel-size", "--max-model-len", "--gpu-memory-utilization",
        "--max-num-seqs", "--max-num-batched-tokens", "--cudagraph-capture-sizes",
    ]
    assert arg(p, "--served-model-name") == "llama-8b"
    assert arg(p, "--max-model-len") == "16384"
    assert arg(p, "--gpu-memory-utilization") == "0.9"
    assert p.max_num_seqs == 32 and arg(p, "--max-num-seqs") == "32"
    assert p.max_model_len == 16384
    # Graphs cover the whole controller range, not only the initial limit.
    assert p.cudagraph_capture_sizes[-1] == 64
    tail = p.args[p.args.index("--cudagraph-capture-sizes") + 1 :]
    assert tuple(int(x) for x in tail) == p.cudagraph_capture_sizes
    assert p.conflicts == ()


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
    assert arg(p, "--max-num-batched-tokens") == "8192"
    assert p.env == ()
    assert p.conflicts == ()
    assert isinstance(p.args, tuple) and isinstance(p.notes, tuple)


def test_gaudi_calibration_sets_quant_config_env_and_no_cuda_graphs() -> None:
    p = plan_engine(hw("Gaudi2"), 8, model(8), EnginePrefs(quant_config="/c/q.json"),
                    BatchBounds())
    assert p.env == (("QUANT_CONFIG", "/c/q.json"),)
    assert "--cudagraph-capture-sizes" not in p.args
    assert p.cudagraph_capture_sizes == ()


def test_memory_fraction_reaches_the_options() -> None:
    assert arg(plan(), "--gpu-memory-utilization") == "0.9"
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=1.0))
    assert (p.gpu_memory_utilization, arg(p, "--gpu-memory-utilization")) == (1.0, "1")
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=0.85))
    assert (p.gpu_memory_utilization, arg(p, "--gpu-memory-utilization")) == (0.85, "0.85")


# ------------------------------------------------------------------ MIG and time-sliced GPUs


@pytest.mark.parametrize(("replicas", "want_gmu"), [
    pytest.param(2, 0.45, id="two-ways"), pytest.param(3, 0.3, id="three-ways"),
    pytest.param(4, 0.225, id="four-ways"), pytest.param(7, 0.128, id="seven-ways-rounded-down"),
    pytest.param(9, 0.1, id="nine-ways-exact-in-thousandths"),
    pytest.param(17, 0.052, id="seventeen-ways"), pytest.param(18, 0.05, id="eighteen-ways"),
    pytest.param(36, 0.025, id="thirty-six-ways"),
])
def test_time_sliced_share_is_rounded_down(replicas: int, want_gmu: float, golden: Golden,
                                           request: pytest.FixtureRequest) -> None:
    p = plan(model=m(0.5, max_model_len=1024), hardware=hw("H200"),
             sharing=GpuSharing(replicas=replicas))
    assert p.gpu_memory_utilization == want_gmu
    assert arg(p, "--gpu-memory-utilization") == f"{want_gmu:g}"
    shared = [n for n in p.notes if n.reason == "SharedGPU"]
    assert [n.field for n in shared] == [F_GMU]
    golden.check("engine", f"plan-time-sliced-{case_id(request)}", shared[0].message)
    assert notes(p, "SharedGPUMemory") == []
    assert notes(p, "MIGSlice") == []


@pytest.mark.parametrize(("gmu", "want_warned"), [
    pytest.param(0.5, False, id="exactly-the-share"),
    pytest.param(0.51, True, id="above-the-share"),
    pytest.param(0.3, False, id="below-the-share"),
])
def test_user_memory_fraction_on_a_shared_gpu(gmu: float, want_warned: bool, golden: Golden,
                                              request: pytest.FixtureRequest) -> None:
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=gmu), sharing=GpuSharing(replicas=2))
    assert p.gpu_memory_utilization == gmu
    assert [n.field for n in p.notes if n.reason.startswith("SharedGPU")] == (
        [F_GMU] * (2 if want_warned else 1))
    if want_warned:
        (warning,) = notes(p, "SharedGPUMemory")
        golden.check("engine", f"plan-shared-memory-{case_id(request)}", warning)
    else:
        assert notes(p, "SharedGPUMemory") == []


def test_whole_gpus_get_no_sharing_notes() -> None:
    p = plan(prefs=EnginePrefs(gpu_memory_utilization=0.95))
    assert p.gpu_memory_utilization == 0.95
    assert not [n for n in p.notes if n.reason in ("SharedGPU", "SharedGPUMemory", "MIGSlice")]


def test_mig_slice_note_and_memory(golden: Golden) -> None:
    p = plan(hardware=replace(H100, memory_gib=19.25), sharing=GpuSharing(mig=True),
             model=m(1.0))
    assert p.tensor_parallel_size == 1
    assert p.gpu_memory_utilization == 0.9
    mig = [n for n in p.notes if n.reason == "MIGSlice"]
    assert [n.field for n in mig] == [F_TP]
    golden.check("engine", "plan-mig-slice", mig[0].message)
    assert notes(p, "SharedGPU") == []


SHARINGS = [pytest.param(GpuSharing(mig=True), id="mig-slice"),
            pytest.param(GpuSharing(replicas=2), id="time-sliced")]


@pytest.mark.parametrize("sharing", SHARINGS)
def test_no_tensor_parallel_on_shared_gpus(sharing: GpuSharing, golden: Golden,
                                           request: pytest.FixtureRequest) -> None:
    err = refusal(prefs=EnginePrefs(tensor_parallel_size=2, tensor_parallel_source=F_GPUS),
                  sharing=sharing)
    # The refusal names the field the user set (here gpusPerReplica), not the derived one.
    assert err.field == F_GPUS
    golden.check("engine", f"plan-no-tp-{case_id(request)}", err.message)
    one = plan(prefs=EnginePrefs(tensor_parallel_size=1), sharing=sharing)
    assert one.tensor_parallel_size == 1
    assert plan(sharing=sharing).tensor_parallel_size == 1


@pytest.mark.parametrize("sharing", SHARINGS)
def test_too_big_for_a_shared_gpu_says_why_no_tp(sharing: GpuSharing, golden: Golden,
                                                 request: pytest.FixtureRequest) -> None:
    err = refusal(model=m(70.0), sharing=sharing)
    assert err.field == F_GPUS
    golden.check("engine", f"plan-too-big-{case_id(request)}", err.message)


def test_too_big_for_whole_gpus_names_no_sharing(golden: Golden) -> None:
    err = refusal(model=m(70.0), gpus=1)
    assert err.field == F_GPUS
    assert "MIG" not in err.message and "time-sliced" not in err.message
    golden.check("engine", "plan-too-big-whole-gpu", err.message)


def test_whole_gpus_shard_up_to_the_pool() -> None:
    assert plan(model=m(70.0), hardware=A100).tensor_parallel_size == 2
    # More GPUs than any TP size considered behave like the largest one.
    assert plan(model=m(1000.0), gpus=100).tensor_parallel_size == 16


# ------------------------------------------------------------------ estimates and notes


def test_estimated_shape_note(golden: Golden) -> None:
    p = plan(model=m(70.0), hardware=A100)
    estimated = [n for n in p.notes if n.reason == "EstimatedShape"]
    assert [n.field for n in estimated] == [F_SIZE]
    golden.check("engine", "plan-estimated-shape-70b", estimated[0].message)
    exact = plan(model=m(8.0, num_layers=32, num_kv_heads=8, head_dim=128))
    assert notes(exact, "EstimatedShape") == []
    partly = plan(model=m(8.0, num_layers=32, num_kv_heads=8))
    assert notes(partly, "EstimatedShape") != []


def test_given_shape_overrides_the_estimate() -> None:
    estimated = plan_engine(H100, 8, model(8), EnginePrefs(), BatchBounds())
    mha = plan_engine(H100, 8, model(8, num_layers=32, num_kv_heads=32, head_dim=128),
                      EnginePrefs(), BatchBounds())
    # 32 KV heads need four times the KV memory of 8 (Llama-2 style MHA vs GQA).
    assert mha.est_max_concurrent_seqs < estimated.est_max_concurrent_seqs / 3


@pytest.mark.parametrize(("hardware", "facts"), [
    pytest.param(A100, m(8.0), id="16-bit-on-ampere"),
    pytest.param(H100, m(8.0), id="8-bit-on-hopper"),
    pytest.param(A100, m(8.0, quantized_checkpoint="awq"), id="4-bit-awq-checkpoint"),
])
def test_weight_width_in_the_tp_note(hardware: HardwareClass, facts: ModelFacts,
                                     golden: Golden, request: pytest.FixtureRequest) -> None:
    (msg,) = notes(plan(model=facts, hardware=hardware), "SmallestFittingTP")
    golden.check("engine", f"plan-tp-note-{case_id(request)}", msg)


def test_estimates_are_rounded_to_hundredths() -> None:
    p = plan()
    # 8B at 8 bits: 8e9 x 1.10 bytes = 8.196 GiB; 72 GiB budget - 1.5 overhead - weights.
    assert p.est_weight_gib_per_gpu == 8.2
    assert p.est_kv_gib_per_gpu == 62.3
    assert p.est_max_concurrent_seqs == 124


def test_fp8_kv_cache_raises_the_feasible_batch() -> None:
    facts = model(8, max_model_len=32768)
    fp8 = plan_engine(H100, 8, facts, EnginePrefs(kv_cache_dtype="fp8"), BatchBounds())
    bf16 = plan_engine(H100, 8, facts, EnginePrefs(kv_cache_dtype="bf16"), BatchBounds())
    assert fp8.est_kv_gib_per_gpu == bf16.est_kv_gib_per_gpu
    assert fp8.est_max_concurrent_seqs >= 2 * bf16.est_max_concurrent_seqs - 1


@pytest.mark.parametrize(("max_seqs", "want_limited"), [
    pytest.param(123, False, id="below-what-kv-holds"),
    pytest.param(124, False, id="exactly-what-kv-holds"),
    pytest.param(125, True, id="one-above-what-kv-holds"),
])
def test_kv_limit_note_boundary(max_seqs: int, want_limited: bool, golden: Golden,
                                request: pytest.FixtureRequest) -> None:
    p = plan(batch=BatchBounds(max_seqs=max_seqs))
    limited = [n for n in p.notes if n.reason == "KVCacheLimited"]
    assert [n.field for n in limited] == (["spec.batching.maxBatch"] if want_limited else [])
    if want_limited:
        golden.check("engine", f"plan-kv-limited-{case_id(request)}", limited[0].message)


def test_kv_limit_note_when_a_long_context_70b_fills_memory() -> None:
    p = plan_engine(A100, 8, model(70, max_model_len=32768), EnginePrefs(), BatchBounds())
    assert p.est_max_concurrent_seqs < 256
    assert "KVCacheLimited" in [n.reason for n in p.notes]


# ------------------------------------------------------------------ the user's extra args


def test_user_extra_args_win_and_are_reported(golden: Golden) -> None:
    prefs = extra("--enforce-eager", "--max-num-seqs", "512")
    p = plan_engine(H100, 8, model(8), prefs, BatchBounds(max_seqs=256))
    assert p.max_num_seqs == 512
    assert list(p.args).count("--max-num-seqs") == 1
    assert arg(p, "--max-num-seqs") == "512"
    assert p.args[-3:] == ("--enforce-eager", "--max-num-seqs", "512")
    ((conflict,),) = [p.conflicts]
    assert (conflict.field, conflict.reason) == ("spec.engine.extraArgs[1]", "UserOverride")
    golden.check("engine", "plan-user-override-batch-limit", conflict.message)


def test_user_override_of_graph_sizes_and_equals_form() -> None:
    p = plan_engine(H100, 8, model(8),
                    extra("--cudagraph-capture-sizes", "1", "8", "--kv-cache-dtype=auto"),
                    BatchBounds())
    assert p.cudagraph_capture_sizes == (1, 8)
    assert p.kv_cache_dtype == "auto"
    assert len(p.conflicts) == 2
    assert list(p.args).count("--cudagraph-capture-sizes") == 1


def test_budget_for_the_objective_reaches_the_args_and_extra_args_still_win() -> None:
    chunk = ChunkBudget(tokens=1792, itl_target_ms=50.0, step_ms=39.9, decode_batch=183)
    planned = plan_engine(H100, 8, model(8), EnginePrefs(), BatchBounds(chunk=chunk))
    assert arg(planned, "--max-num-batched-tokens") == "1792"
    assert planned.max_num_batched_tokens == 1792
    assert notes(planned, "ChunkedPrefillBudget")[0].startswith("1792 tokens per step")
    user = plan_engine(H100, 8, model(8), extra("--max-num-batched-tokens=4k"),
                       BatchBounds(chunk=chunk))
    assert user.max_num_batched_tokens == 4000
    assert [c.reason for c in user.conflicts] == ["UserOverride"]


def test_user_tp_override_recomputes_estimates() -> None:
    base = plan_engine(H100, 8, model(70), EnginePrefs(), BatchBounds())
    p = plan_engine(H100, 8, model(70), extra("-tp", "4"), BatchBounds())
    assert p.tensor_parallel_size == 4
    assert base.tensor_parallel_size != 4
    assert p.est_weight_gib_per_gpu < base.est_weight_gib_per_gpu
    assert [c.field for c in p.conflicts] == ["spec.engine.extraArgs[0]"]


def test_user_tp_above_pool_is_refused_like_the_spec_field(golden: Golden) -> None:
    # More GPUs than a node has would leave every pod Pending, whichever way it is asked.
    with pytest.raises(EngineError) as err:
        plan_engine(H100, 8, model(8), extra("--tensor-parallel-size", "16"), BatchBounds())
    assert err.value.field == "spec.engine.extraArgs[0]"
    golden.check("engine", "plan-tp-above-pool-extra-arg", err.value.message)
    with pytest.raises(EngineError) as spec_err:
        plan_engine(H100, 8, model(8), EnginePrefs(tensor_parallel_size=16), BatchBounds())
    assert spec_err.value.field == F_TP
    golden.check("engine", "plan-tp-above-pool-spec-field", spec_err.value.message)


def test_tp_must_divide_attention_heads_not_only_kv_heads(golden: Golden) -> None:
    # Qwen2.5-72B: 64 heads, 8 KV heads -> 8 works; Qwen2.5-7B: 28 heads, 4 KV heads.
    qwen7 = model(7.6, num_layers=28, num_kv_heads=4, num_attention_heads=28, head_dim=128)
    with pytest.raises(EngineError) as err:
        plan_engine(H100, 8, qwen7, EnginePrefs(tensor_parallel_size=8), BatchBounds())
    assert err.value.field == F_TP
    golden.check("engine", "plan-tp-does-not-divide-attention-heads", err.value.message)
    p = plan_engine(H100, 8, qwen7, EnginePrefs(tensor_parallel_size=4), BatchBounds())
    assert p.tensor_parallel_size == 4
    with pytest.raises(EngineError) as extra_err:
        plan_engine(H100, 8, qwen7, extra("-tp", "8"), BatchBounds())
    assert extra_err.value.field == "spec.engine.extraArgs[0]"


def test_estimates_follow_an_added_context_length(golden: Golden) -> None:
    # --max-model-len is not generated without spec.model.maxModelLen: no conflict, yet the
    # effective context is the user's and the estimates must use it.
    spec = plan(model=m(max_model_len=65536))
    added = plan(prefs=extra("--max-model-len", "65536"))
    assert added.conflicts == ()
    assert added.max_model_len == 65536
    assert added.est_max_concurrent_seqs == spec.est_max_concurrent_seqs == 15
    (limited,) = notes(added, "KVCacheLimited")
    assert notes(spec, "KVCacheLimited") == [limited]
    golden.check("engine", "plan-kv-limited-long-context", limited)


def test_estimates_follow_added_quantization() -> None:
    base = plan(model=m(70.0), hardware=A100)
    fp8 = plan(model=m(70.0), hardware=A100, prefs=extra("--quantization", "fp8"))
    assert fp8.conflicts == () and fp8.quantization == "fp8"
    assert fp8.tensor_parallel_size == base.tensor_parallel_size == 2
    assert fp8.est_weight_gib_per_gpu == 35.86 < base.est_weight_gib_per_gpu == 66.5


def test_context_auto_override_sizes_for_the_default_window() -> None:
    p = plan(model=m(max_model_len=65536), prefs=extra("--max-model-len", "auto"))
    assert p.max_model_len is None
    assert p.est_max_concurrent_seqs == plan().est_max_concurrent_seqs == 124


def test_estimates_follow_a_memory_override_at_tp_one() -> None:
    p = plan(prefs=extra("--gpu-memory-utilization", "0.5"))
    assert p.tensor_parallel_size == 1
    # 40 GiB - 8.2 weights - 1.5 overhead.
    assert (p.est_weight_gib_per_gpu, p.est_kv_gib_per_gpu) == (8.2, 30.3)
    assert notes(p, "OverrideMayNotFit") == []


def test_an_override_that_may_not_fit_is_noted(golden: Golden) -> None:
    p = plan(prefs=extra("--gpu-memory-utilization", "0.1"))
    may_not_fit = [n for n in p.notes if n.reason == "OverrideMayNotFit"]
    assert [n.field for n in may_not_fit] == ["spec.engine.extraArgs"]
    golden.check("engine", "plan-override-may-not-fit", may_not_fit[0].message)
    assert p.est_kv_gib_per_gpu == 0.0 and p.est_max_concurrent_seqs == 0


def test_an_override_fits_only_with_room_for_the_minimum_batch() -> None:
    # 0.3 x 80 = 24 GiB - 8.2 - 1.5 leaves about 14.3 GiB: 28 sequences of 8192 tokens.
    prefs = extra("--gpu-memory-utilization", "0.3")
    roomy = plan(prefs=prefs, batch=BatchBounds(min_seqs=28))
    assert roomy.est_max_concurrent_seqs == 28
    assert notes(roomy, "OverrideMayNotFit") == []
    tight = plan(prefs=prefs, batch=BatchBounds(min_seqs=29))
    assert notes(tight, "OverrideMayNotFit") != []


def test_same_value_override_changes_no_estimate() -> None:
    p = plan(prefs=extra("--gpu-memory-utilization", "0.9"))
    assert len(p.conflicts) == 1
    base = plan()
    assert (p.est_weight_gib_per_gpu, p.est_kv_gib_per_gpu, p.est_max_concurrent_seqs) == (
        base.est_weight_gib_per_gpu, base.est_kv_gib_per_gpu, base.est_max_concurrent_seqs)


# ------------------------------------------------------------------ the matrix


KNOWN_ERROR_FIELDS = {
    "spec.engine.precision",
    "spec.engine.kvCacheDtype",
    "spec.hardware.gpusPerReplica",
    "spec.model.sizeBillions",
}


@pytest.fixture(scope="module")
def fixture_spec() -> VllmArgSpec:
    return VllmArgSpec(json.loads(SERVE_ARGS.read_text()))


@pytest.mark.parametrize("product", load_catalogue().names())
def test_every_plan_validates_against_vllm(product: str, fixture_spec: VllmArgSpec) -> None:
    """Catalogue x precision x kv-cache dtype x quantization policy x model size: each
    plan validates against the captured vLLM parser; each refusal names a CRD field."""
    hardware = hw(product)
    planned = 0
    for size in (8.0, 70.0):
        for precision in PRECISIONS:
            for kv in KV_CACHE_DTYPES:
                for allow in (True, False):
                    prefs = EnginePrefs(
                        precision=precision,  # type: ignore[arg-type]
                        kv_cache_dtype=kv,  # type: ignore[arg-type]
                        allow_quantization=allow,
                    )
                    batch = BatchBounds(min_seqs=1, max_seqs=128)
                    try:
                        p = plan_engine(hardware, 8, model(size), prefs, batch)
                    except EngineError as err:
                        assert err.field in KNOWN_ERROR_FIELDS, (precision, kv, err)
                        assert err.message
                        continue
                    planned += 1
                    assert fixture_spec.validate(p.args) == [], p.args
                    assert 1 <= p.tensor_parallel_size <= 8
                    assert p.est_max_concurrent_seqs >= 1
                    if not allow:
                        assert p.quantization is None
                        assert not p.kv_cache_dtype.startswith("fp8")
                    if not hardware.bf16:
                        assert p.dtype == "half"
                    if hardware.vendor == "amd":
                        assert p.kv_cache_dtype != "fp8_e5m2"
                    if precision == "auto" and p.quantization == "fp8":
                        assert hardware.fp8_compute
    assert planned > 0


def _label_sets() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(
        NODE_LABELS.read_text())
    return entries


def test_every_fixture_node_big_enough_for_1b_plans_cleanly(fixture_spec: VllmArgSpec) -> None:
    """Pools from the real label sets that are big enough for a 1B model plan cleanly."""
    planned = 0
    for entry in _label_sets():
        res = classify_node(entry["labels"])
        assert res.hardware is not None
        try:
            p = plan_engine(res.hardware, max(res.gpus_per_node, 1), model(1), EnginePrefs(),
                            BatchBounds())
        except EngineError as err:
            assert err.field.startswith("spec."), err
            continue
        planned += 1
        assert fixture_spec.validate(p.args) == []
    assert planned >= 12


# ------------------------------------------------------------------ real node label sets


def _fixture_node(product: str) -> NodeInfo:
    entry = next(e for e in _label_sets() if e["product"] == product)
    return NodeInfo("gpu-node", {str(k): str(v) for k, v in entry["labels"].items()})


def _plan_on(product: str, **spec: Any) -> ServicePlan | Problem:
    node = _fixture_node(product)
    body = {"model": {"name": "Qwen/Qwen2.5-0.5B", "sizeBillions": 0.5, "maxModelLen": 1024}}
    body.update(spec)
    return plan_service(
        name="svc", namespace="ns", uid="", spec=InferenceServiceSpec.model_validate(body),
        policy=SLOPolicySpec(), policy_name="", pools=discover_pools([node]), nodes=[node],
        replicas=1)


@pytest.mark.parametrize(("product", "want_resource", "want_max_gib"), [
    pytest.param("A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu", 5.0, id="mig-single-strategy"),
    pytest.param("NVIDIA-H100-80GB-HBM3 (MIG mixed, all-balanced)", "nvidia.com/mig-1g.10gb",
                 10.0, id="mig-mixed-smallest-slice"),
])
def test_mig_plans_one_slice_with_its_memory(product: str, want_resource: str,
                                             want_max_gib: float) -> None:
    p = _plan_on(product)
    assert isinstance(p, ServicePlan), p
    assert p.engine.tensor_parallel_size == 1
    assert p.render.gpu_resource == want_resource
    assert p.render.gpus_per_replica == 1
    hardware = p.pool.resolution.hardware
    assert hardware is not None and hardware.memory_gib <= want_max_gib
    assert "MIGSlice" in [n.reason for n in p.engine.notes]


@pytest.mark.parametrize("product", [pytest.param("A100-SXM4-40GB-MIG-1g.5gb", id="mig-slice"),
                                     pytest.param("Tesla-T4-SHARED", id="time-sliced")])
@pytest.mark.parametrize("engine", [
    pytest.param({"tensorParallelSize": 2}, id="spec-field"),
    pytest.param({"extraArgs": ["--tensor-parallel-size", "2"]}, id="extra-arg"),
])
def test_no_tensor_parallel_across_slices_or_shared_gpus(product: str,
                                                         engine: dict[str, Any]) -> None:
    problem = _plan_on(product, engine=engine)
    assert isinstance(problem, Problem), problem
    assert problem.field in (F_TP, "spec.engine.extraArgs[0]")


def test_model_too_big_for_a_slice_says_slices_cannot_combine(golden: Golden) -> None:
    problem = _plan_on("A100-SXM4-40GB-MIG-1g.5gb", model={"name": "m", "sizeBillions": 8})
    assert isinstance(problem, Problem)
    assert problem.field == F_GPUS
    golden.check("engine", "plan-node-too-big-for-a-mig-slice", problem.message)


def test_time_sliced_gpu_gets_a_memory_share_and_a_warning() -> None:
    p = _plan_on("Tesla-T4-SHARED")
    assert isinstance(p, ServicePlan), p
    assert p.engine.tensor_parallel_size == 1
    # Four pods share each T4: each vLLM may take a quarter of 0.9 of its memory.
    assert p.engine.gpu_memory_utilization == pytest.approx(0.225)
    assert "--gpu-memory-utilization" in p.engine.args
    assert "SharedGPU" in [n.reason for n in p.engine.notes]


def test_errors_name_the_field_the_user_set() -> None:
    # gpusPerReplica sets the tensor-parallel size; the refusal names it, not the derived field.
    problem = _plan_on("A100-SXM4-40GB-MIG-1g.5gb", hardware={
        "gpuProducts": ["A100"], "gpusPerReplica": 2})
    assert isinstance(problem, Problem), problem
    assert problem.field == F_GPUS


def test_time_slicing_with_renamed_resource_requests_the_shared_resource() -> None:
    # renameByDefault=true keeps the product name and advertises nvidia.com/gpu.shared.
    labels = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "Tesla-T4",
              "nvidia.com/gpu.replicas": "4"}
    node = NodeInfo("t4", labels, {"nvidia.com/gpu.shared": "16"})
    spec = InferenceServiceSpec.model_validate({"model": {
        "name": "m", "sizeBillions": 0.5, "maxModelLen": 1024}})
    p = plan_service(name="svc", namespace="ns", uid="", spec=spec, policy=SLOPolicySpec(),
                     policy_name="", pools=discover_pools([node]), nodes=[node], replicas=1)
    assert isinstance(p, ServicePlan), p
    assert p.render.gpu_resource == "nvidia.com/gpu.shared"
    assert p.engine.gpu_memory_utilization == pytest.approx(0.225)
