"""Engine planner: hardware class + model + preferences -> vLLM options."""

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
    EngineError,
    EnginePlan,
    EnginePrefs,
    ModelFacts,
    VllmArgSpec,
    cudagraph_capture_sizes,
    estimate_layers,
    plan_engine,
)
from slo_operator.engine.limits import TooLarge, parse_count
from slo_operator.hardware import classify_node, load_catalogue
from slo_operator.reconcile.desired import (
    NodeInfo,
    Problem,
    ServicePlan,
    discover_pools,
    plan_service,
)
from tests.support.hardware import hw
from tests.support.paths import FIXTURES

SERVE_ARGS = FIXTURES / "vllm" / "serve-args-vllm-0.32.0.json"


def model(size: float | None = 8.0, **kw: object) -> ModelFacts:
    return ModelFacts(name="meta-llama/Llama-3.1-8B-Instruct", params_billion=size, **kw)  # type: ignore[arg-type]


def arg_value(plan: EnginePlan, flag: str) -> str | None:
    args = list(plan.args)
    if flag not in args:
        return None
    return args[args.index(flag) + 1]


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
    want_error_text: str = ""


NO_Q = EnginePrefs(allow_quantization=False)
CASES = [
    Case(
        "8b-on-h100-auto-picks-fp8-weights-and-fp8-kv",
        "H100",
        model(8),
        want_dtype="bfloat16",
        want_quantization="fp8",
        want_kv="fp8",
        want_tp=1,
        want_note="FP8Native",
    ),
    Case(
        "8b-on-a100-stays-bf16-without-quantization",
        "A100-80GB",
        model(8),
        want_dtype="bfloat16",
        want_quantization=None,
        want_kv="auto",
        want_tp=1,
        want_note="NoFP8KVCache",
    ),
    Case(
        "8b-on-t4-uses-half-and-needs-two-gpus",
        "T4",
        model(8),
        want_dtype="half",
        want_quantization=None,
        want_kv="auto",
        want_tp=2,
        want_note="NoBF16",
    ),
    Case("70b-on-a100-80gb-x8-shards", "A100-80GB", model(70), want_tp_at_least=2),
    Case(
        "70b-on-h200-with-fp8-fits-one-gpu",
        "H200",
        model(70),
        EnginePrefs(precision="fp8"),
        want_quantization="fp8",
        want_tp=1,
    ),
    Case(
        "70b-on-h200-without-quantization-needs-two",
        "H200",
        model(70),
        NO_Q,
        want_quantization=None,
        want_kv="auto",
        want_tp=2,
        want_note="NoFP8",
    ),
    Case(
        "explicit-fp8-on-ampere-is-weight-only-marlin",
        "A100-80GB",
        model(8),
        EnginePrefs(precision="fp8"),
        want_quantization="fp8",
        want_kv="auto",
        want_note="FP8WeightOnly",
    ),
    Case(
        "explicit-fp8-on-turing-rejected",
        "T4",
        model(8),
        EnginePrefs(precision="fp8"),
        want_error_field="spec.engine.precision",
        want_error_text="8.0",
    ),
    Case(
        "explicit-bf16-on-turing-rejected",
        "T4",
        model(8),
        EnginePrefs(precision="bf16"),
        want_error_field="spec.engine.precision",
        want_error_text="no BF16",
    ),
    Case(
        "explicit-bf16-on-volta-rejected",
        "V100",
        model(1),
        EnginePrefs(precision="bf16"),
        want_error_field="spec.engine.precision",
    ),
    Case(
        "explicit-fp16-on-hopper-keeps-fp8-kv",
        "H100",
        model(8),
        EnginePrefs(precision="fp16"),
        want_dtype="half",
        want_quantization=None,
        want_kv="fp8",
    ),
    Case(
        "explicit-fp8-on-mi250x-rejected-no-marlin-on-rocm",
        "MI250X",
        model(8),
        EnginePrefs(precision="fp8"),
        want_error_field="spec.engine.precision",
        want_error_text="ROCm",
    ),
    Case(
        "mi300x-auto-fp8-with-rocm-kv-spelling",
        "MI300X",
        model(70),
        want_quantization="fp8",
        want_kv="fp8_e4m3",
        want_tp=1,
    ),
    Case(
        "mi300x-kv-fp8-becomes-e4m3",
        "MI300X",
        model(8),
        EnginePrefs(kv_cache_dtype="fp8"),
        want_kv="fp8_e4m3",
    ),
    Case(
        "mi300x-kv-e5m2-rejected",
        "MI300X",
        model(8),
        EnginePrefs(kv_cache_dtype="fp8_e5m2"),
        want_error_field="spec.engine.kvCacheDtype",
        want_error_text="CUDA-only",
    ),
    Case(
        "mi250x-kv-fp8-rejected",
        "MI250X",
        model(8),
        EnginePrefs(kv_cache_dtype="fp8"),
        want_error_field="spec.engine.kvCacheDtype",
    ),
    Case(
        "mi250x-auto-bf16-no-fp8",
        "MI250X",
        model(8),
        want_dtype="bfloat16",
        want_quantization=None,
        want_kv="auto",
    ),
    Case(
        "explicit-fp8-kv-on-ampere-kept-with-warning",
        "A100-80GB",
        model(8),
        EnginePrefs(kv_cache_dtype="fp8"),
        want_kv="fp8",
        want_note="FP8KVCacheRisk",
    ),
    Case(
        "h100-kv-e5m2-allowed-on-cuda",
        "H100",
        model(8),
        EnginePrefs(kv_cache_dtype="fp8_e5m2"),
        want_kv="fp8_e5m2",
    ),
    Case(
        "h100-kv-bf16-explicit",
        "H100",
        model(8),
        EnginePrefs(kv_cache_dtype="bf16"),
        want_kv="bfloat16",
    ),
    Case(
        "t4-kv-bf16-rejected",
        "T4",
        model(1),
        EnginePrefs(kv_cache_dtype="bf16"),
        want_error_field="spec.engine.kvCacheDtype",
    ),
    Case(
        "kv-fp8-when-quantization-forbidden-rejected",
        "H100",
        model(8),
        EnginePrefs(kv_cache_dtype="fp8", allow_quantization=False),
        want_error_field="spec.engine.kvCacheDtype",
        want_error_text="forbids quantization",
    ),
    Case(
        "precision-fp8-when-quantization-forbidden-rejected",
        "H100",
        model(8),
        EnginePrefs(precision="fp8", allow_quantization=False),
        want_error_field="spec.engine.precision",
        want_error_text="spec.allowQuantization",
    ),
    Case(
        "gaudi2-without-calibration-stays-bf16",
        "Gaudi2",
        model(8),
        want_dtype="bfloat16",
        want_quantization=None,
        want_kv="auto",
        want_note="NoCalibration",
    ),
    Case(
        "gaudi3-with-calibration-uses-inc",
        "Gaudi3",
        model(70),
        EnginePrefs(quant_config="/calib/maxabs_quant.json"),
        want_quantization="inc",
        want_kv="fp8_inc",
        want_tp=1,
    ),
    Case(
        "gaudi2-explicit-fp8-without-calibration-rejected",
        "Gaudi2",
        model(8),
        EnginePrefs(precision="fp8"),
        want_error_field="spec.engine.precision",
        want_error_text="QUANT_CONFIG",
    ),
    Case(
        "model-size-missing",
        "H100",
        model(None),
        want_error_field="spec.model.sizeBillions",
    ),
    Case(
        "405b-on-one-l4-asks-for-more-gpus-per-replica",
        "L4",
        model(405),
        gpus=1,
        want_error_field="spec.hardware.gpusPerReplica",
        want_error_text="GPUs per replica",
    ),
    Case(
        "absurd-model-does-not-fit-anywhere",
        "T4",
        model(5000),
        want_error_field="spec.model.sizeBillions",
    ),
    Case(
        "explicit-tp-above-pool",
        "H100",
        model(8),
        EnginePrefs(tensor_parallel_size=16),
        want_error_field="spec.engine.tensorParallelSize",
        want_error_text="exceeds",
    ),
    Case(
        "explicit-tp-too-small-for-70b-bf16",
        "A100-80GB",
        model(70),
        EnginePrefs(tensor_parallel_size=1),
        want_error_field="spec.engine.tensorParallelSize",
        want_error_text="does not fit",
    ),
    Case(
        "explicit-tp-must-divide-kv-heads",
        "H100",
        model(8, num_kv_heads=8),
        EnginePrefs(tensor_parallel_size=3),
        want_error_field="spec.engine.tensorParallelSize",
        want_error_text="KV heads",
    ),
    Case(
        "explicit-tp-honoured",
        "H100",
        model(8),
        EnginePrefs(tensor_parallel_size=4),
        want_tp=4,
    ),
    Case(
        "70b-bf16-on-l4-needs-all-eight",
        "L4",
        model(70, num_kv_heads=8),
        EnginePrefs(allow_quantization=False),
        want_tp=8,
    ),
    Case(
        "auto-tp-never-picks-a-size-that-splits-kv-heads",
        "L4",
        model(70, num_kv_heads=20),
        EnginePrefs(allow_quantization=False),
        want_error_field="spec.engine.tensorParallelSize",
        want_error_text="20 KV heads",
    ),
    Case(
        "explicit-non-power-of-two-tp-dividing-heads",
        "L4",
        model(70, num_kv_heads=20),
        EnginePrefs(allow_quantization=False, tensor_parallel_size=5),
        gpus=8,
        want_error_field="spec.engine.tensorParallelSize",
        want_error_text="does not fit",
    ),
    Case(
        "kv-heads-4-allow-tp-8-by-replication",
        "L4",
        model(70, num_kv_heads=4),
        EnginePrefs(allow_quantization=False),
        want_tp=8,
    ),
    Case(
        "batched-tokens-below-max-seqs-rejected",
        "H100",
        model(8),
        EnginePrefs(max_num_batched_tokens=128),
        want_error_field="spec.engine.maxNumBatchedTokens",
    ),
    Case(
        "gpu-memory-utilization-out-of-range",
        "H100",
        model(8),
        EnginePrefs(gpu_memory_utilization=1.5),
        want_error_field="spec.engine.gpuMemoryUtilization",
    ),
    Case(
        "awq-checkpoint-passes-no-quantization-flag",
        "H100",
        model(70, quantized_checkpoint="awq"),
        want_quantization=None,
        want_tp=1,
        want_note="QuantizedCheckpoint",
    ),
    Case(
        "awq-checkpoint-cannot-be-fp8-requantized",
        "H100",
        model(70, quantized_checkpoint="awq"),
        EnginePrefs(precision="fp8"),
        want_error_field="spec.engine.precision",
    ),
    Case(
        "fp8-checkpoint-on-turing-rejected",
        "T4",
        model(8, quantized_checkpoint="fp8"),
        want_error_field="spec.model.quantizedCheckpoint",
    ),
    Case(
        "fp8-checkpoint-on-ampere-loads-weight-only-70b-needs-two",
        "A100-80GB",
        model(70, quantized_checkpoint="fp8"),
        want_quantization=None,
        want_tp=2,
    ),
    Case(
        "min-batch-above-max-batch",
        "H100",
        model(8),
        batch=BatchBounds(min_seqs=64, max_seqs=8),
        want_error_field="spec.batching.maxBatch",
    ),
    Case(
        "min-batch-zero",
        "H100",
        model(8),
        batch=BatchBounds(min_seqs=0, max_seqs=8),
        want_error_field="spec.batching.minBatch",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_rules(case: Case) -> None:
    hardware = hw(case.product)
    if case.want_error_field is not None:
        with pytest.raises(EngineError) as err:
            plan_engine(hardware, case.gpus, case.model, case.prefs, case.batch)
        assert err.value.field == case.want_error_field, err.value.message
        assert case.want_error_text in err.value.message
        return
    plan = plan_engine(hardware, case.gpus, case.model, case.prefs, case.batch)
    if case.want_dtype is not None:
        assert plan.dtype == case.want_dtype
        assert arg_value(plan, "--dtype") == case.want_dtype
    if case.want_kv is not None:
        assert plan.kv_cache_dtype == case.want_kv
        assert arg_value(plan, "--kv-cache-dtype") == case.want_kv
    if case.want_quantization != "<any>":
        assert plan.quantization == case.want_quantization
        assert arg_value(plan, "--quantization") == case.want_quantization
    if case.want_tp is not None:
        assert plan.tensor_parallel_size == case.want_tp
    if case.want_tp_at_least is not None:
        assert plan.tensor_parallel_size >= case.want_tp_at_least
    assert arg_value(plan, "--tensor-parallel-size") == str(plan.tensor_parallel_size)
    if case.want_note is not None:
        assert case.want_note in [n.reason for n in plan.notes], plan.notes


def test_gaudi_calibration_sets_quant_config_env() -> None:
    plan = plan_engine(
        hw("Gaudi2"), 8, model(8), EnginePrefs(quant_config="/c/q.json"), BatchBounds()
    )
    assert plan.env == (("QUANT_CONFIG", "/c/q.json"),)
    assert "--cudagraph-capture-sizes" not in plan.args
    assert plan.cudagraph_capture_sizes == ()


def test_args_order_and_content() -> None:
    plan = plan_engine(
        hw("H100"),
        8,
        model(8, served_name="llama-8b", max_model_len=16384),
        EnginePrefs(),
        BatchBounds(min_seqs=4, max_seqs=64, initial=32),
    )
    flags = [a for a in plan.args if a.startswith("--")]
    assert plan.args[:2] == ("--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert flags == [
        "--model",
        "--served-model-name",
        "--dtype",
        "--quantization",
        "--kv-cache-dtype",
        "--tensor-parallel-size",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--cudagraph-capture-sizes",
    ]
    assert arg_value(plan, "--served-model-name") == "llama-8b"
    assert arg_value(plan, "--max-model-len") == "16384"
    assert arg_value(plan, "--gpu-memory-utilization") == "0.9"
    assert plan.max_num_seqs == 32 and arg_value(plan, "--max-num-seqs") == "32"
    assert plan.max_model_len == 16384
    # Graphs cover the whole controller range, not only the initial limit.
    assert plan.cudagraph_capture_sizes[-1] == 64
    tail = plan.args[plan.args.index("--cudagraph-capture-sizes") + 1 :]
    assert tuple(int(x) for x in tail) == plan.cudagraph_capture_sizes
    assert plan.conflicts == ()


@pytest.mark.parametrize(
    ("product", "want"),
    [
        ("H100", 8192),  # >= 70 GiB, not A100
        ("H200", 8192),
        ("MI300X", 8192),
        ("B200", 8192),
        ("A100-80GB", 2048),  # excluded by name in vLLM (PR #17885)
        ("L40S", 2048),
        ("L4", 2048),
    ],
)
def test_default_batched_tokens_by_gpu_class(product: str, want: int) -> None:
    plan = plan_engine(hw(product), 8, model(8), EnginePrefs(), BatchBounds(max_seqs=128))
    assert plan.max_num_batched_tokens == want
    assert arg_value(plan, "--max-num-batched-tokens") == str(want)


@pytest.mark.parametrize(("initial", "want"), [(2, 8), (64, 64), (999, 128)])
def test_initial_batch_is_clamped_into_policy_range(initial: int, want: int) -> None:
    batch = BatchBounds(min_seqs=8, max_seqs=128, initial=initial)
    plan = plan_engine(hw("H100"), 8, model(8), EnginePrefs(), batch)
    assert plan.max_num_seqs == want
    assert arg_value(plan, "--max-num-seqs") == str(want)
    clamped = "InitialBatchClamped" in [n.reason for n in plan.notes]
    assert clamped is (want != initial)


def test_batched_tokens_never_below_max_seqs() -> None:
    plan = plan_engine(hw("L4"), 8, model(1), EnginePrefs(), BatchBounds(max_seqs=4096))
    assert plan.max_num_batched_tokens == 4096


@pytest.mark.parametrize(
    ("max_seqs", "want_head", "want_tail"),
    [
        (1, (1,), (1,)),
        (6, (1, 2, 4), (4, 6)),
        (64, (1, 2, 4, 8, 16), (56, 64)),
        (300, (1, 2, 4, 8), (248, 256, 272, 288, 300)),
    ],
)
def test_cudagraph_capture_sizes(
    max_seqs: int, want_head: tuple[int, ...], want_tail: tuple[int, ...]
) -> None:
    sizes = cudagraph_capture_sizes(max_seqs)
    assert sizes[: len(want_head)] == want_head
    assert sizes[-len(want_tail) :] == want_tail
    assert list(sizes) == sorted(set(sizes))
    # Every batch limit the controller may choose pads to a captured size.
    for limit in range(1, max_seqs + 1):
        assert any(s >= limit for s in sizes)
    assert max(sizes) == max_seqs


def test_fp8_kv_cache_raises_feasible_batch() -> None:
    m = model(8, max_model_len=32768)
    fp8 = plan_engine(hw("H100"), 8, m, EnginePrefs(kv_cache_dtype="fp8"), BatchBounds())
    bf16 = plan_engine(hw("H100"), 8, m, EnginePrefs(kv_cache_dtype="bf16"), BatchBounds())
    assert fp8.est_kv_gib_per_gpu == bf16.est_kv_gib_per_gpu
    assert fp8.est_max_concurrent_seqs >= 2 * bf16.est_max_concurrent_seqs - 1


def test_kv_limit_note_when_batch_exceeds_memory() -> None:
    plan = plan_engine(
        hw("A100-80GB"), 8, model(70, max_model_len=32768), EnginePrefs(), BatchBounds()
    )
    assert plan.est_max_concurrent_seqs < 256
    assert "KVCacheLimited" in [n.reason for n in plan.notes]


def test_given_shape_overrides_estimate() -> None:
    estimated = plan_engine(hw("H100"), 8, model(8), EnginePrefs(), BatchBounds())
    mha = plan_engine(
        hw("H100"),
        8,
        model(8, num_layers=32, num_kv_heads=32, head_dim=128),
        EnginePrefs(),
        BatchBounds(),
    )
    assert "EstimatedShape" in [n.reason for n in estimated.notes]
    assert "EstimatedShape" not in [n.reason for n in mha.notes]
    # 32 KV heads need four times the KV memory of 8 (Llama-2 style MHA vs GQA).
    assert mha.est_max_concurrent_seqs < estimated.est_max_concurrent_seqs / 3


@pytest.mark.parametrize(
    ("params", "want"), [(0.5, 16), (1, 16), (8, 32), (70, 80), (405, 126), (1000, 126)]
)
def test_estimate_layers_matches_anchors(params: float, want: int) -> None:
    assert estimate_layers(params) == want


def test_estimate_layers_is_monotonic() -> None:
    sizes = [0.5, 1, 2, 3, 7, 8, 13, 14, 30, 32, 34, 65, 70, 180, 405]
    layers = [estimate_layers(s) for s in sizes]
    assert layers == sorted(layers)


def test_unknown_old_gpu_rejected() -> None:
    res = classify_node(
        {
            "nvidia.com/gpu.product": "GeForce-GT-710",
            "nvidia.com/gpu.compute.major": "3",
            "nvidia.com/gpu.compute.minor": "3",
            "nvidia.com/gpu.memory": "2048",
        }
    )
    assert res.hardware is not None
    with pytest.raises(EngineError) as err:
        plan_engine(res.hardware, 1, model(1), EnginePrefs(), BatchBounds())
    assert err.value.field == "spec.hardware.gpuProducts"


def test_unknown_memory_rejected() -> None:
    res = classify_node({"nvidia.com/gpu.product": "NVIDIA-H20", "nvidia.com/gpu.family": "hopper"})
    assert res.hardware is not None and res.hardware.memory_gib == 0
    with pytest.raises(EngineError) as err:
        plan_engine(res.hardware, 8, model(8), EnginePrefs(), BatchBounds())
    assert err.value.field == "spec.hardware.gpuProducts"


# ------------------------------------------------------------------ extra args


def test_user_extra_args_win_and_are_reported() -> None:
    prefs = EnginePrefs(extra_args=("--enforce-eager", "--max-num-seqs", "512"))
    plan = plan_engine(hw("H100"), 8, model(8), prefs, BatchBounds(max_seqs=256))
    assert plan.max_num_seqs == 512
    assert list(plan.args).count("--max-num-seqs") == 1
    assert arg_value(plan, "--max-num-seqs") == "512"
    assert plan.args[-3:] == ("--enforce-eager", "--max-num-seqs", "512")
    ((conflict,),) = [plan.conflicts]
    assert conflict.field == "spec.engine.extraArgs[1]"
    assert conflict.reason == "UserOverride"
    assert "--max-num-seqs 256" in conflict.message


def test_user_tp_override_recomputes_estimates() -> None:
    base = plan_engine(hw("H100"), 8, model(70), EnginePrefs(), BatchBounds())
    prefs = EnginePrefs(extra_args=("-tp", "4"))
    plan = plan_engine(hw("H100"), 8, model(70), prefs, BatchBounds())
    assert plan.tensor_parallel_size == 4
    assert base.tensor_parallel_size != 4
    assert plan.est_weight_gib_per_gpu < base.est_weight_gib_per_gpu
    assert [c.field for c in plan.conflicts] == ["spec.engine.extraArgs[0]"]


def test_user_tp_above_pool_is_refused_like_the_spec_field() -> None:
    # The same rule as spec.engine.tensorParallelSize: more GPUs than a node has would
    # leave every pod Pending.
    prefs = EnginePrefs(extra_args=("--tensor-parallel-size", "16"))
    with pytest.raises(EngineError) as err:
        plan_engine(hw("H100"), 8, model(8), prefs, BatchBounds())
    assert err.value.field == "spec.engine.extraArgs[0]"
    with pytest.raises(EngineError) as spec_err:
        plan_engine(hw("H100"), 8, model(8), EnginePrefs(tensor_parallel_size=16), BatchBounds())
    assert spec_err.value.field == "spec.engine.tensorParallelSize"


@pytest.mark.parametrize(
    ("extra", "want_field", "want_text"),
    [
        pytest.param(("--tensor-parallel-size", "-1"), "spec.engine.extraArgs[0]",
                     "greater than or equal to 1", id="tp-negative"),
        pytest.param(("--enforce-eager", "-tp", "0"), "spec.engine.extraArgs[1]",
                     "greater than or equal to 1", id="tp-zero"),
        pytest.param(("--gpu-memory-utilization", "2"), "spec.engine.extraArgs[0]",
                     "less than or equal to 1", id="gmu-above-one"),
        pytest.param(("--gpu-memory-utilization", "inf"), "spec.engine.extraArgs[0]",
                     "finite", id="gmu-inf"),
        pytest.param(("--gpu-memory-utilization", "nan"), "spec.engine.extraArgs[0]",
                     "finite", id="gmu-nan"),
        pytest.param(("--max-num-seqs", "-5"), "spec.engine.extraArgs[0]",
                     "greater than or equal to 1", id="negative-batch-ceiling"),
        pytest.param(("--max-num-batched-tokens", "99999999999999999999999k"),
                     "spec.engine.extraArgs[0]", "less than or equal to 10000000",
                     id="huge-with-k-suffix"),
        pytest.param(("--max-num-batched-tokens", "9" * 60 + "T"),
                     "spec.engine.extraArgs[0]", "far too large", id="astronomical"),
        pytest.param(("--max-num-batched-tokens", "16"), "spec.engine.extraArgs[0]",
                     "below --max-num-seqs 256", id="budget-below-batch"),
        pytest.param(("--max-num-seqs", "4000", "--max-num-batched-tokens", "2k"),
                     "spec.engine.extraArgs[2]", "below --max-num-seqs 4000",
                     id="batch-above-budget"),
        pytest.param(("--max-model-len", "8"), "spec.engine.extraArgs[0]",
                     "greater than or equal to 16", id="context-too-short"),
        pytest.param(("--cudagraph-capture-sizes", "8", "-1"), "spec.engine.extraArgs[0]",
                     "integer from 1", id="negative-graph-size"),
        pytest.param(("--pipeline-parallel-size", "2"), "spec.engine.extraArgs[0]",
                     "only 1", id="pipeline-parallel-needs-more-gpus"),
    ],
)
def test_extra_arg_values_get_the_spec_fields_checks(
    extra: tuple[str, ...], want_field: str, want_text: str
) -> None:
    with pytest.raises(EngineError) as err:
        plan_engine(hw("H100"), 8, model(8), EnginePrefs(extra_args=extra), BatchBounds())
    assert err.value.field == want_field
    assert want_text in err.value.message


@pytest.mark.parametrize(("field", "facts"), [
    ("spec.model.name", ModelFacts(name="-x", params_billion=8)),
    ("spec.model.servedName", ModelFacts(name="m", served_name="--foo", params_billion=8)),
])
def test_names_starting_with_a_dash_are_refused(field: str, facts: ModelFacts) -> None:
    with pytest.raises(EngineError) as err:
        plan_engine(hw("H100"), 8, facts, EnginePrefs(), BatchBounds())
    assert err.value.field == field


def test_tp_must_divide_attention_heads_not_only_kv_heads() -> None:
    # Qwen2.5-72B: 64 heads, 8 KV heads -> 8 works; Qwen2.5-7B: 28 heads, 4 KV heads.
    qwen7 = model(7.6, num_layers=28, num_kv_heads=4, num_attention_heads=28, head_dim=128)
    with pytest.raises(EngineError) as err:
        plan_engine(hw("H100"), 8, qwen7, EnginePrefs(tensor_parallel_size=8), BatchBounds())
    assert err.value.field == "spec.engine.tensorParallelSize"
    assert "28 attention heads" in err.value.message
    plan = plan_engine(hw("H100"), 8, qwen7, EnginePrefs(tensor_parallel_size=4), BatchBounds())
    assert plan.tensor_parallel_size == 4
    with pytest.raises(EngineError):
        plan_engine(hw("H100"), 8, qwen7, EnginePrefs(extra_args=("-tp", "8")), BatchBounds())


def test_user_override_of_graph_sizes_and_equals_form() -> None:
    prefs = EnginePrefs(extra_args=("--cudagraph-capture-sizes", "1", "8", "--kv-cache-dtype=auto"))
    plan = plan_engine(hw("H100"), 8, model(8), prefs, BatchBounds())
    assert plan.cudagraph_capture_sizes == (1, 8)
    assert plan.kv_cache_dtype == "auto"
    assert len(plan.conflicts) == 2
    assert list(plan.args).count("--cudagraph-capture-sizes") == 1


@pytest.mark.parametrize(
    ("extra", "want_field"),
    [
        (("--max-num-seqs", "lots"), "spec.engine.extraArgs[1]"),
        (("--enforce-eager", "--warp-speed"), "spec.engine.extraArgs[1]"),
        (("--dtype", "bf16"), "spec.engine.extraArgs[1]"),
        (("--quantization", "fp9"), "spec.engine.extraArgs[1]"),
        (("--enforce-eager", "--model", "other"), "spec.engine.extraArgs[1]"),
    ],
    ids=["bad-int", "unknown-flag", "bad-choice", "unknown-quantization", "model-is-reserved"],
)
def test_invalid_extra_args_raise(extra: tuple[str, ...], want_field: str) -> None:
    with pytest.raises(EngineError) as err:
        plan_engine(hw("H100"), 8, model(8), EnginePrefs(extra_args=extra), BatchBounds())
    assert err.value.field == want_field


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


def test_exported_value_tuples() -> None:
    assert PRECISIONS == ("auto", "bf16", "fp16", "fp8")
    assert KV_CACHE_DTYPES == ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16")


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
                        plan = plan_engine(hardware, 8, model(size), prefs, batch)
                    except EngineError as err:
                        assert err.field in KNOWN_ERROR_FIELDS, (precision, kv, err)
                        assert err.message
                        continue
                    planned += 1
                    assert fixture_spec.validate(plan.args) == [], plan.args
                    assert 1 <= plan.tensor_parallel_size <= 8
                    assert plan.est_max_concurrent_seqs >= 1
                    if not allow:
                        assert plan.quantization is None
                        assert not plan.kv_cache_dtype.startswith("fp8")
                    if not hardware.bf16:
                        assert plan.dtype == "half"
                    if hardware.vendor == "amd":
                        assert plan.kv_cache_dtype != "fp8_e5m2"
                    if precision == "auto" and plan.quantization == "fp8":
                        assert hardware.fp8_compute
    assert planned > 0


def test_matrix_over_fixture_nodes_plans_every_resolved_pool(fixture_spec: VllmArgSpec) -> None:
    """Pools from the real label sets that are big enough for a 1B model plan cleanly."""
    import yaml

    sets = yaml.safe_load((FIXTURES / "hardware" / "node-labels.yaml").read_text())
    planned = 0
    for entry in sets:
        res = classify_node(entry["labels"])
        assert res.hardware is not None
        try:
            plan = plan_engine(
                res.hardware, max(res.gpus_per_node, 1), model(1), EnginePrefs(), BatchBounds()
            )
        except EngineError as err:
            assert err.field.startswith("spec."), err
            continue
        planned += 1
        assert fixture_spec.validate(plan.args) == []
    assert planned >= 12


def test_hardware_class_is_not_mutated() -> None:
    h = hw("H100")
    before = replace(h)
    plan_engine(h, 8, model(8), EnginePrefs(), BatchBounds())
    assert h == before


# ------------------------------------------------------------------ MIG and time-sliced GPUs


def _fixture_node(product: str) -> NodeInfo:
    entries = yaml.safe_load((FIXTURES / "hardware" / "node-labels.yaml").read_text())
    entry = next(e for e in entries if e["product"] == product)
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
    plan = _plan_on(product)
    assert isinstance(plan, ServicePlan), plan
    assert plan.engine.tensor_parallel_size == 1
    assert plan.render.gpu_resource == want_resource
    assert plan.render.gpus_per_replica == 1
    hw = plan.pool.resolution.hardware
    assert hw is not None and hw.memory_gib <= want_max_gib
    assert any("MIG slice" in n for n in plan.notes)


@pytest.mark.parametrize("product", ["A100-SXM4-40GB-MIG-1g.5gb", "Tesla-T4-SHARED"])
def test_no_tensor_parallel_across_slices_or_shared_gpus(product: str) -> None:
    for engine in ({"tensorParallelSize": 2}, {"extraArgs": ["--tensor-parallel-size", "2"]}):
        problem = _plan_on(product, engine=engine)
        assert isinstance(problem, Problem), problem
        assert problem.field in ("spec.engine.tensorParallelSize", "spec.engine.extraArgs[0]")


def test_model_too_big_for_a_slice_says_slices_cannot_combine() -> None:
    problem = _plan_on("A100-SXM4-40GB-MIG-1g.5gb", model={"name": "m", "sizeBillions": 8})
    assert isinstance(problem, Problem)
    assert "MIG" in problem.message


def test_time_sliced_gpu_gets_a_memory_share_and_a_warning() -> None:
    plan = _plan_on("Tesla-T4-SHARED")
    assert isinstance(plan, ServicePlan), plan
    assert plan.engine.tensor_parallel_size == 1
    # Four pods share each T4: each vLLM may take a quarter of 0.9 of its memory.
    assert plan.engine.gpu_memory_utilization == pytest.approx(0.225)
    assert "--gpu-memory-utilization" in plan.engine.args
    assert any("time-sliced 4 ways" in n for n in plan.notes)


def test_errors_name_the_field_the_user_set() -> None:
    # gpusPerReplica sets the tensor-parallel size; the refusal names it, not the derived field.
    problem = _plan_on("A100-SXM4-40GB-MIG-1g.5gb", hardware={
        "gpuProducts": ["A100"], "gpusPerReplica": 2})
    assert isinstance(problem, Problem), problem
    assert problem.field == "spec.hardware.gpusPerReplica"


def test_time_slicing_with_renamed_resource_requests_the_shared_resource() -> None:
    # renameByDefault=true keeps the product name and advertises nvidia.com/gpu.shared.
    labels = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "Tesla-T4",
              "nvidia.com/gpu.replicas": "4"}
    node = NodeInfo("t4", labels, {"nvidia.com/gpu.shared": "16"})
    spec = InferenceServiceSpec.model_validate({"model": {
        "name": "m", "sizeBillions": 0.5, "maxModelLen": 1024}})
    plan = plan_service(name="svc", namespace="ns", uid="", spec=spec, policy=SLOPolicySpec(),
                        policy_name="", pools=discover_pools([node]), nodes=[node], replicas=1)
    assert isinstance(plan, ServicePlan), plan
    assert plan.render.gpu_resource == "nvidia.com/gpu.shared"
    assert plan.engine.gpu_memory_utilization == pytest.approx(0.225)


@pytest.mark.parametrize(("raw", "want"), [
    ("8192", 8192), ("8k", 8000), ("8K", 8192), ("1.5Ki", 1536), ("2m", 2_000_000),
    ("1.5", None), ("abc", None), ("inf", None), ("nan", None), ("", None), ("-3", -3),
])
def test_parse_count_reads_vllms_human_readable_ints(raw: str, want: int | None) -> None:
    assert parse_count(raw) == want


def test_parse_count_refuses_astronomical_numbers_without_building_them() -> None:
    with pytest.raises(TooLarge):
        parse_count("1e999999999")


@pytest.mark.parametrize("extra", [("--port", "9000"), ("--host=0.0.0.0",), ("--uds", "/s"),
                                   ("--headless",)])
def test_serving_address_is_the_operators(extra: tuple[str, ...]) -> None:
    # vLLM must listen where the gateway forwards; the launcher would override it anyway.
    with pytest.raises(EngineError) as err:
        plan_engine(hw("H100"), 8, model(8), EnginePrefs(extra_args=extra), BatchBounds())
    assert err.value.field == "spec.engine.extraArgs[0]"
    assert "gateway" in err.value.message
