"""Hardware class + model + preferences -> ``vllm serve`` options.

Every rule cites its source; ``docs/hardware-and-engine.md`` lists them in one place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slo_operator.engine.limits import TooLarge, checked, parse_count
from slo_operator.engine.sizing import (
    DEFAULT_CONTEXT_TOKENS,
    Fit,
    ModelShape,
    checkpoint_bytes_per_param,
    fit,
    model_shape,
    weight_gib,
)
from slo_operator.engine.types import (
    BatchBounds,
    EngineError,
    EnginePlan,
    EnginePrefs,
    GpuSharing,
    ModelFacts,
    Note,
)
from slo_operator.engine.vllm_args import ParsedOption, VllmArgSpec
from slo_operator.hardware import HardwareClass
from slo_runtime.contract import FP8_KV_CACHE_DTYPES, FP8_QUANT_METHODS

# Below vLLM's own default (0.92 in the 0.32.0 serve-args capture) to leave room for the
# in-pod runtime gateway and allocator fragmentation.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90

# vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: for the OpenAI API server,
# 8192 batched tokens on GPUs with >= 70 GiB that are not A100 ("For GPUs like H100 and
# MI300x"), else 2048; A100 is excluded because a large budget reduced its throughput
# (vLLM PR #17885). The budget bounds prefill work per step, hence inter-token latency.
LARGE_GPU_GIB = 70.0
BATCHED_TOKENS_LARGE_GPU = 8192
BATCHED_TOKENS_OTHER = 2048

# vLLM supports NVIDIA GPUs from compute capability 7.0 (docs/getting_started/
# installation/gpu: "GPU: compute capability 7.0 or higher").
MIN_CUDA_CC = (7, 0)

# A CUDA graph per batch size beyond the largest batch ceiling (maxBatch <= 4096) is
# memory spent on batches that never run.
MAX_GRAPH_SIZE = 4096

# Largest TP size considered when telling the user how many GPUs a model would need.
MAX_TP_HINT = 64

# Field paths (CRD, camelCase) named by EngineError and Notes.
F_NAME = "spec.model.name"
F_SERVED = "spec.model.servedName"
F_SIZE = "spec.model.sizeBillions"
F_MAX_LEN = "spec.model.maxModelLen"
F_CHECKPOINT = "spec.model.quantizedCheckpoint"
F_PRECISION = "spec.engine.precision"
F_KV = "spec.engine.kvCacheDtype"
F_TP = "spec.engine.tensorParallelSize"
F_GMU = "spec.engine.gpuMemoryUtilization"
F_MNBT = "spec.engine.maxNumBatchedTokens"
F_EXTRA = "spec.engine.extraArgs"
F_GPUS = "spec.hardware.gpusPerReplica"
F_PRODUCTS = "spec.hardware.gpuProducts"
F_ALLOW_Q = "spec.allowQuantization"  # on the SLOPolicy
F_MIN_BATCH = "spec.batching.minBatch"  # on the SLOPolicy
F_MAX_BATCH = "spec.batching.maxBatch"  # on the SLOPolicy

# Options the operator owns; extra args may not set them (value: what to use instead).
_GATEWAY = "leave it out: the in-pod gateway serves the pod's port and reaches vLLM on loopback"
RESERVED_DESTS = {
    "model": "use spec.model.name",
    "host": _GATEWAY,
    "port": _GATEWAY,
    "uds": _GATEWAY,
    "headless": _GATEWAY,
}

# One home for both sets, shared with the in-pod launcher.
_FP8_KV = FP8_KV_CACHE_DTYPES
_FP8_CHECKPOINTS = FP8_QUANT_METHODS


def _no_tp_reason(hw: HardwareClass, sharing: GpuSharing) -> str:
    if sharing.mig:
        return (f"{hw.display_name} is a MIG slice; vLLM cannot run tensor parallel across "
                "MIG instances (NCCL has no peer-to-peer path between them): use 1, or a "
                "larger MIG profile or whole GPUs")
    return (f"{hw.display_name} is time-sliced {sharing.replicas} ways; tensor-parallel ranks "
            "could share one physical GPU: use 1, or whole GPUs")


def cudagraph_capture_sizes(max_seqs: int) -> tuple[int, ...]:
    """Batch sizes to capture CUDA graphs for, up to and including ``max_seqs``.

    Same pattern as vLLM's default (vllm/config/vllm.py _set_cudagraph_sizes: 1, 2, 4,
    multiples of 8 below 256, then multiples of 16), but it always reaches ``max_seqs``
    so every batch limit the controller may choose is padded to a captured graph instead
    of falling back to eager decode. Passed as ``--cudagraph-capture-sizes`` (type int,
    nargs "+" in the vLLM 0.32.0 serve-args capture).
    """
    sizes = {s for s in (1, 2, 4) if s <= max_seqs}
    sizes.update(range(8, min(256, max_seqs + 1), 8))
    sizes.update(range(256, max_seqs + 1, 16))
    sizes.add(max_seqs)
    return tuple(sorted(sizes))


def default_max_num_batched_tokens(hw: HardwareClass) -> int:
    """vLLM's API-server default chunked-prefill budget for a GPU class."""
    if hw.memory_gib >= LARGE_GPU_GIB and not hw.product.upper().startswith("A100"):
        return BATCHED_TOKENS_LARGE_GPU
    return BATCHED_TOKENS_OTHER


def _cc(hw: HardwareClass) -> str:
    if hw.compute_capability is None:
        return "unknown compute capability"
    return f"compute capability {hw.compute_capability[0]}.{hw.compute_capability[1]}"


def _check_inputs(
    hw: HardwareClass, gpus_per_node: int, model: ModelFacts, prefs: EnginePrefs, batch: BatchBounds
) -> tuple[float, float]:
    if hw.memory_gib <= 0:
        raise EngineError(
            F_PRODUCTS,
            f"GPU memory of {hw.display_name} is unknown (no nvidia.com/gpu.memory or "
            "amd.com/gpu.vram label and not in the catalogue); pick a known GPU product",
        )
    if (
        hw.vendor == "nvidia"
        and hw.compute_capability is not None
        and hw.compute_capability < MIN_CUDA_CC
    ):
        raise EngineError(
            F_PRODUCTS,
            f"{hw.display_name} has {_cc(hw)}; vLLM needs 7.0 or newer",
        )
    if gpus_per_node < 1:
        raise EngineError(F_GPUS, f"need at least one GPU per replica, got {gpus_per_node}")
    # argparse would read a leading "-" as an option, not as the value.
    for path, value in ((F_NAME, model.name), (F_SERVED, model.served_name)):
        if value is not None and (value.startswith("-") or not value.strip()):
            raise EngineError(path, f"{value!r} must not be empty or start with '-'")
    if model.params_billion is None:
        raise EngineError(
            F_SIZE, "model size is needed to plan tensor parallelism and KV-cache memory"
        )
    if model.params_billion <= 0:
        raise EngineError(F_SIZE, f"model size must be positive, got {model.params_billion}")
    if model.max_model_len is not None and model.max_model_len < 1:
        raise EngineError(F_MAX_LEN, f"must be positive, got {model.max_model_len}")
    if batch.min_seqs < 1:
        raise EngineError(F_MIN_BATCH, f"must be at least 1, got {batch.min_seqs}")
    if batch.max_seqs < batch.min_seqs:
        raise EngineError(
            F_MAX_BATCH, f"{batch.max_seqs} is below the minimum batch {batch.min_seqs}"
        )
    gmu = (
        prefs.gpu_memory_utilization
        if prefs.gpu_memory_utilization is not None
        else DEFAULT_GPU_MEMORY_UTILIZATION
    )
    if not 0 < gmu <= 1:
        raise EngineError(F_GMU, f"must be in (0, 1], got {gmu}")
    return model.params_billion, gmu


def _weights(
    hw: HardwareClass, model: ModelFacts, prefs: EnginePrefs, notes: list[Note]
) -> tuple[str, str | None, float, list[tuple[str, str]]]:
    """(dtype, quantization, bytes per parameter, env)."""
    prec = prefs.precision
    if prec == "bf16" and not hw.bf16:
        # vllm/platforms/cuda.py check_if_supports_dtype: "Bfloat16 is only supported on
        # GPUs with compute capability of at least 8.0 ... use --dtype=half".
        raise EngineError(
            F_PRECISION,
            f"{hw.display_name} ({_cc(hw)}) has no BF16; vLLM requires compute capability "
            "8.0 for bfloat16. Use fp16 or auto",
        )
    dtype = "half" if prec == "fp16" or not hw.bf16 else "bfloat16"
    if not hw.bf16 and prec == "auto":
        notes.append(
            Note(F_PRECISION, "NoBF16", f"{hw.display_name} has no BF16; activations use FP16")
        )

    if model.quantized_checkpoint:
        method = model.quantized_checkpoint
        bpp = checkpoint_bytes_per_param(method)
        if bpp is None:
            bpp = 2.0
            notes.append(
                Note(
                    F_CHECKPOINT,
                    "UnknownCheckpointQuantization",
                    f"checkpoint method {method!r} is not known to the planner; weights "
                    "sized at 2 bytes per parameter",
                )
            )
        if method.strip().lower() in _FP8_CHECKPOINTS and not (
            hw.fp8_compute or hw.fp8_weight_only
        ):
            # FP8 checkpoints load through the same FP8 method: capability 8.0 on CUDA
            # (fp8.py get_min_capability), gfx94x/gfx95x/gfx12 on ROCm (rocm.py).
            raise EngineError(
                F_CHECKPOINT,
                f"{hw.display_name} cannot load an FP8 checkpoint ({method}); use a 16-bit "
                "or an int4/AWQ/GPTQ checkpoint",
            )
        if prec == "fp8" and bpp != 1.0:
            raise EngineError(
                F_PRECISION,
                f"the checkpoint is already quantized ({method}); precision fp8 cannot "
                "re-quantize it. Use auto",
            )
        notes.append(
            Note(
                F_CHECKPOINT,
                "QuantizedCheckpoint",
                f"checkpoint is pre-quantized ({method}); vLLM reads the method from its "
                "config, so no --quantization is passed",
            )
        )
        return dtype, None, bpp, []

    if prec in ("bf16", "fp16"):
        return dtype, None, 2.0, []

    explicit = prec == "fp8"
    if explicit and not prefs.allow_quantization:
        raise EngineError(
            F_PRECISION,
            "precision fp8 quantizes the weights, but the SLO policy forbids quantization "
            f"({F_ALLOW_Q}=false)",
        )

    if hw.vendor == "intel":
        # Gaudi FP8 goes through Intel Neural Compressor with a measured calibration file
        # (vllm docs supported_hardware.md: Intel Gaudi supports INC W8A8 only;
        # docs/features/quantization/inc.md: "QUANT_CONFIG=... vllm serve ...
        # --quantization inc --kv-cache-dtype fp8_inc"). Measurements are device-specific:
        # Gaudi 3 scales cannot be used on Gaudi 2 (docs.habana.ai vLLM FP8 inference).
        if not hw.fp8_compute or (not explicit and not prefs.allow_quantization):
            return dtype, None, 2.0, []
        if prefs.quant_config is None:
            if explicit:
                raise EngineError(
                    F_PRECISION,
                    f"FP8 on {hw.display_name} needs an Intel Neural Compressor calibration "
                    "file (QUANT_CONFIG); none is configured",
                )
            notes.append(
                Note(
                    F_PRECISION,
                    "NoCalibration",
                    f"{hw.display_name} supports FP8 only with an INC calibration file "
                    "(QUANT_CONFIG); none is configured, so weights stay BF16",
                )
            )
            return dtype, None, 2.0, []
        notes.append(Note(F_PRECISION, "FP8Calibrated", "FP8 through INC with QUANT_CONFIG"))
        return dtype, "inc", 1.0, [("QUANT_CONFIG", prefs.quant_config)]

    if not explicit:
        if hw.fp8_compute and prefs.allow_quantization:
            notes.append(
                Note(
                    F_PRECISION,
                    "FP8Native",
                    f"{hw.display_name} computes FP8 natively (W8A8); weights quantized "
                    "online with --quantization fp8, halving weight memory. FP8 pays off "
                    "only with fused kernels: confirm with the runtime profile",
                )
            )
            return dtype, "fp8", 1.0, []
        if hw.fp8_compute:
            why = f"the SLO policy forbids quantization ({F_ALLOW_Q}=false)"
        elif hw.fp8_weight_only:
            why = (
                f"{hw.display_name} has no native FP8; FP8 would be weight-only through "
                "Marlin (memory saved, no speed-up), so it is used only when asked for"
            )
        else:
            why = f"{hw.display_name} has no FP8 support in vLLM"
        notes.append(Note(F_PRECISION, "NoFP8", f"weights stay 16-bit: {why}"))
        return dtype, None, 2.0, []

    # Explicit fp8.
    if hw.fp8_compute:
        notes.append(Note(F_PRECISION, "FP8Native", "FP8 W8A8 as requested"))
        return dtype, "fp8", 1.0, []
    if hw.fp8_weight_only:
        # vllm/model_executor/layers/quantization/fp8.py: use_marlin when the device lacks
        # capability 8.9; marlin_utils_fp8.py warns "Weight-only FP8 compression will be
        # used leveraging the Marlin kernel".
        notes.append(
            Note(
                F_PRECISION,
                "FP8WeightOnly",
                f"{hw.display_name} has no native FP8: vLLM runs FP8 weight-only through the "
                "Marlin kernel (memory saved, no FP8 compute speed-up)",
            )
        )
        return dtype, "fp8", 1.0, []
    if hw.vendor == "amd":
        raise EngineError(
            F_PRECISION,
            f"{hw.display_name} ({hw.gfx_target or 'unknown gfx target'}) has no FP8 in vLLM "
            "(vllm/platforms/rocm.py supports_fp8: gfx94x, gfx95x, gfx12 only) and the "
            "weight-only Marlin fallback is disabled on ROCm",
        )
    raise EngineError(
        F_PRECISION,
        f"{hw.display_name} ({_cc(hw)}) cannot run --quantization fp8; vLLM's FP8 method "
        "needs compute capability 8.0 (fp8.py get_min_capability)",
    )


def _kv_cache(
    hw: HardwareClass, prefs: EnginePrefs, dtype: str, notes: list[Note]
) -> tuple[str, float]:
    """(--kv-cache-dtype value, bytes per element)."""
    kv = prefs.kv_cache_dtype
    allow = prefs.allow_quantization
    if kv == "auto":
        if hw.vendor == "intel":
            if hw.fp8_kv_cache and allow and prefs.quant_config is not None:
                return "fp8_inc", 1.0
            return "auto", 2.0
        if hw.fp8_kv_cache and allow:
            # ROCm takes fp8/fp8_e4m3 (MI300 stores float8_e4m3fnuz: rocm.py is_fp8_fnuz);
            # fp8_e5m2 is CUDA-only (docs/features/quantization/quantized_kvcache.md).
            value = "fp8_e4m3" if hw.vendor == "amd" else "fp8"
            notes.append(
                Note(
                    F_KV,
                    "FP8KVCache",
                    f"KV cache in FP8 ({value}) halves KV memory and raises the feasible "
                    "batch; default scales (1.0) may cost some accuracy (quantized_kvcache.md)",
                )
            )
            return value, 1.0
        if hw.fp8_kv_cache:
            why = f"the SLO policy forbids quantization ({F_ALLOW_Q}=false)"
        elif hw.architecture == "ampere":
            why = (
                "FP8 KV cache is known to fail on Ampere (vLLM issues #26431, #7714 with "
                "chunked prefill)"
            )
        else:
            why = f"{hw.display_name} has no FP8 KV-cache support"
        notes.append(Note(F_KV, "NoFP8KVCache", f"KV cache keeps the model dtype: {why}"))
        return "auto", 2.0

    if kv in ("bf16", "fp16"):
        if kv == "bf16" and not hw.bf16:
            raise EngineError(F_KV, f"{hw.display_name} ({_cc(hw)}) has no BF16")
        return ("bfloat16" if kv == "bf16" else "float16"), 2.0

    # fp8, fp8_e4m3, fp8_e5m2
    if not allow:
        raise EngineError(
            F_KV,
            f"kvCacheDtype {kv} quantizes the KV cache, but the SLO policy forbids "
            f"quantization ({F_ALLOW_Q}=false)",
        )
    if hw.vendor == "intel":
        if kv == "fp8_e5m2":
            raise EngineError(F_KV, "Intel Gaudi stores an FP8 KV cache as fp8_inc (E4M3)")
        if prefs.quant_config is None:
            raise EngineError(
                F_KV,
                f"an FP8 KV cache on {hw.display_name} needs an INC calibration file "
                "(QUANT_CONFIG); none is configured",
            )
        return "fp8_inc", 1.0
    if hw.vendor == "amd":
        if kv == "fp8_e5m2":
            raise EngineError(
                F_KV,
                "fp8_e5m2 is CUDA-only; ROCm supports fp8 / fp8_e4m3 "
                "(docs/features/quantization/quantized_kvcache.md)",
            )
        if not hw.fp8_kv_cache:
            raise EngineError(
                F_KV,
                f"{hw.display_name} ({hw.gfx_target or 'unknown gfx target'}) has no FP8 in "
                "vLLM (rocm.py supports_fp8: gfx94x, gfx95x, gfx12 only)",
            )
        return "fp8_e4m3", 1.0
    if not hw.fp8_kv_cache:
        notes.append(
            Note(
                F_KV,
                "FP8KVCacheRisk",
                f"{kv} KV cache on {hw.display_name} ({_cc(hw)}) has known failures "
                "(vLLM issues #26431: Triton has no fp8e4nv before 8.9; #7714: FP8 KV with "
                "chunked prefill on Ampere); kept because it was asked for",
            )
        )
    return kv, 1.0


def _heads_ok(model: ModelFacts, tp: int) -> bool:
    """vLLM shards KV heads when TP divides them and replicates them when they divide TP
    (vllm/model_executor/layers/linear.py QKVParallelLinear), and refuses a TP size that
    does not divide the attention heads (vllm/config/model.py verify_with_parallel_config:
    "Total number of attention heads must be divisible by tensor parallel size")."""
    heads = model.num_attention_heads
    if heads is not None and heads % tp != 0:
        return False
    kv = model.num_kv_heads
    if kv is None:
        return True
    return kv % tp == 0 or tp % kv == 0


def _heads_text(model: ModelFacts) -> str:
    parts = []
    if model.num_attention_heads is not None:
        parts.append(f"{model.num_attention_heads} attention heads")
    if model.num_kv_heads is not None:
        parts.append(f"{model.num_kv_heads} KV heads")
    return " and ".join(parts) or "heads"


def _powers_of_two(limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def _choose_tp(
    *,
    hw: HardwareClass,
    gpus_per_node: int,
    model: ModelFacts,
    prefs: EnginePrefs,
    shape: ModelShape,
    total_weight: float,
    kv_bytes: float,
    gmu: float,
    ctx: int,
    reserve_seqs: int,
    dtype_desc: str,
    notes: list[Note],
) -> Fit:
    def at(tp: int) -> Fit:
        return fit(
            tp=tp,
            total_weight_gib=total_weight,
            shape=shape,
            kv_bytes=kv_bytes,
            memory_gib=hw.memory_gib,
            gpu_memory_utilization=gmu,
            context_tokens=ctx,
            reserve_seqs=reserve_seqs,
        )

    budget = hw.memory_gib * gmu

    def shortfall(f: Fit) -> str:
        return (
            f"weights {f.weight_gib_per_gpu:.1f} GiB + overhead + KV for {reserve_seqs} "
            f"sequence(s) of {ctx} tokens ({f.kv_reserve_gib_per_gpu:.1f} GiB) exceed "
            f"{budget:.1f} GiB per GPU ({hw.memory_gib:.1f} GiB x {gmu:g}) at TP {f.tp}"
        )

    if prefs.tensor_parallel_size is not None:
        tp = prefs.tensor_parallel_size
        src = prefs.tensor_parallel_source
        if tp < 1:
            raise EngineError(src, f"must be at least 1, got {tp}")
        if tp > gpus_per_node:
            raise EngineError(
                src, f"{tp} exceeds the {gpus_per_node} GPUs per replica of this pool"
            )
        if not _heads_ok(model, tp):
            raise EngineError(
                src,
                f"{tp} does not divide the model's {_heads_text(model)} (KV heads may also "
                "be a divisor of it)",
            )
        f = at(tp)
        if not f.fits:
            raise EngineError(src, f"model does not fit: {shortfall(f)}")
        return f

    candidates = [tp for tp in _powers_of_two(gpus_per_node) if _heads_ok(model, tp)]
    tried: Fit | None = None
    for tp in candidates:
        f = at(tp)
        if f.fits:
            if gpus_per_node & (gpus_per_node - 1):
                notes.append(
                    Note(
                        F_TP,
                        "PowerOfTwoTP",
                        f"TP sizes tried are powers of two up to {gpus_per_node} GPUs",
                    )
                )
            notes.append(
                Note(
                    F_TP,
                    "SmallestFittingTP",
                    f"TP {tp}: smallest size where {dtype_desc} weights "
                    f"({f.weight_gib_per_gpu:.1f} GiB per GPU) and KV for {reserve_seqs} "
                    f"sequence(s) of {ctx} tokens fit in {budget:.1f} GiB per GPU",
                )
            )
            return f
        tried = f
    more = [
        tp
        for tp in _powers_of_two(MAX_TP_HINT)
        if tp > gpus_per_node and _heads_ok(model, tp) and at(tp).fits
    ]
    detail = shortfall(tried) if tried is not None else "no TP size divides the KV heads"
    hint = ""
    if prefs.precision == "auto" and hw.fp8_compute and not prefs.allow_quantization:
        hint = "; FP8 weights would halve the weight memory if the policy allowed quantization"
    blocked = [
        tp for tp in _powers_of_two(gpus_per_node) if not _heads_ok(model, tp) and at(tp).fits
    ]
    if blocked:
        divisors = [d for d in range(1, gpus_per_node + 1) if _heads_ok(model, d)]
        raise EngineError(
            F_TP,
            f"TP {blocked[0]} would fit in memory but does not divide the model's "
            f"{_heads_text(model)}; set tensorParallelSize to one of "
            f"{', '.join(str(d) for d in divisors)} that fits",
        )
    if more:
        raise EngineError(
            F_GPUS,
            f"{model.name} ({model.params_billion:g}B) needs {more[0]} {hw.display_name} GPUs "
            f"per replica, the pool offers {gpus_per_node}: {detail}{hint}",
        )
    raise EngineError(
        F_SIZE,
        f"{model.name} ({model.params_billion:g}B) does not fit on {MAX_TP_HINT} "
        f"{hw.display_name} GPUs: {detail}{hint}",
    )


def _merge_extra(
    spec: VllmArgSpec, generated: list[str], extra: Sequence[str]
) -> tuple[list[str], list[Note], dict[str, ParsedOption]]:
    """User extra args win over generated options with the same destination."""
    problems = spec.validate_extra_args(extra, F_EXTRA)
    if problems:
        p = problems[0]
        others = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise EngineError(p.path or F_EXTRA, p.message + others)
    user_opts, _ = spec.parse(extra)
    user: dict[str, ParsedOption] = {}
    for uo in user_opts:
        owner = RESERVED_DESTS.get(uo.action.dest)
        if owner is not None:
            raise EngineError(
                f"{F_EXTRA}[{uo.start}]", f"{uo.flag} is set by the operator; {owner}"
            )
        user[uo.action.dest] = uo  # argparse keeps the last occurrence
    gen_opts, gen_problems = spec.parse(generated)
    if gen_problems:  # pragma: no cover - a bug in this module, caught by the tests
        raise AssertionError(f"generated args do not parse: {gen_problems}")
    merged: list[str] = []
    conflicts: list[Note] = []
    for go in gen_opts:
        override = user.get(go.action.dest)
        if override is None:
            merged.extend(generated[go.start : go.end])
            continue
        conflicts.append(
            Note(
                f"{F_EXTRA}[{override.start}]",
                "UserOverride",
                f"{' '.join(extra[override.start : override.end])} replaces the generated "
                f"{' '.join(generated[go.start : go.end])}",
            )
        )
    merged.extend(extra)
    return merged, conflicts, user


def _quant_bytes(quantization: str | None, default: float) -> float:
    if quantization is None:
        return default
    bpp = checkpoint_bytes_per_param(quantization)
    return bpp if bpp is not None else default


def _sharing_notes(
    hw: HardwareClass, sharing: GpuSharing, prefs: EnginePrefs, gmu: float, notes: list[Note]
) -> float:
    """Memory share on time-sliced GPUs, and the warnings MIG and sharing deserve."""
    if sharing.mig:
        notes.append(Note(F_TP, "MIGSlice", f"{hw.display_name} is a MIG slice: planned with "
                          f"the slice's {hw.memory_gib:.1f} GiB and tensor parallel 1 "
                          "(no tensor parallelism across MIG instances)"))
    if not sharing.shared:
        return gmu
    share = 1.0 / sharing.replicas
    if prefs.gpu_memory_utilization is None:
        # vLLM takes gpu-memory-utilization of the whole GPU's memory for itself; with
        # N pods time-slicing one GPU each may take only its share, or the later ones
        # fail at start with too little free memory.
        gmu = math.floor(DEFAULT_GPU_MEMORY_UTILIZATION * share * 1000) / 1000
    notes.append(Note(F_GMU, "SharedGPU", f"{hw.display_name} is time-sliced "
                      f"{sharing.replicas} ways: latency is not isolated from other pods on "
                      f"the GPU; vLLM gets --gpu-memory-utilization {gmu:g} (its share of "
                      "the memory) and tensor parallel 1"))
    if gmu > share:
        notes.append(Note(F_GMU, "SharedGPUMemory", f"{gmu:g} of the GPU's memory is more "
                          f"than a 1/{sharing.replicas} share; other pods on the same GPU "
                          "may fail to start"))
    return gmu


def plan_engine(
    hw: HardwareClass,
    gpus_per_node: int,
    model: ModelFacts,
    prefs: EnginePrefs,
    batch: BatchBounds,
    sharing: GpuSharing | None = None,
) -> EnginePlan:
    """Choose vLLM options for one replica. Raises ``EngineError`` on invalid or
    infeasible input, naming the CRD field to change. ``sharing`` says whether the pool's
    GPUs are MIG slices or time-sliced: both get tensor parallel 1, and time-sliced GPUs a
    share of the memory."""
    sharing = sharing or GpuSharing()
    params, gmu = _check_inputs(hw, gpus_per_node, model, prefs, batch)
    notes: list[Note] = []
    gmu = _sharing_notes(hw, sharing, prefs, gmu, notes)
    # More GPUs than any TP size considered is no different from MAX_TP_HINT (and keeps the
    # divisor search bounded whatever a node label claims).
    tp_pool = min(gpus_per_node, MAX_TP_HINT) if sharing.whole else 1
    if not sharing.whole and (prefs.tensor_parallel_size or 1) > 1:
        raise EngineError(prefs.tensor_parallel_source,
                          f"{prefs.tensor_parallel_size}: {_no_tp_reason(hw, sharing)}")

    dtype, quantization, bpp, env = _weights(hw, model, prefs, notes)
    kv_dtype, kv_bytes = _kv_cache(hw, prefs, dtype, notes)

    shape = model_shape(params, model.num_layers, model.num_kv_heads, model.head_dim)
    if shape.estimated:
        notes.append(
            Note(
                F_SIZE,
                "EstimatedShape",
                f"KV sizing estimated from {params:g}B parameters: {shape.num_layers} layers, "
                f"{shape.num_kv_heads} KV heads of {shape.head_dim} (Llama-family shape); "
                "set numLayers, numKVHeads and headDim for an exact figure",
            )
        )
    ctx = model.max_model_len if model.max_model_len is not None else DEFAULT_CONTEXT_TOKENS
    total_weight = weight_gib(params, bpp)
    dtype_desc = {2.0: "16-bit", 1.0: "8-bit", 0.5: "4-bit"}.get(bpp, f"{bpp:g}-byte")
    try:
        chosen = _choose_tp(
            hw=hw,
            gpus_per_node=tp_pool,
            model=model,
            prefs=prefs,
            shape=shape,
            total_weight=total_weight,
            kv_bytes=kv_bytes,
            gmu=gmu,
            ctx=ctx,
            reserve_seqs=batch.min_seqs,
            dtype_desc=dtype_desc,
            notes=notes,
        )
    except EngineError as err:
        if sharing.whole:
            raise
        raise EngineError(err.field, f"{err.message} ({_no_tp_reason(hw, sharing)})") from None

    max_num_seqs = batch.initial if batch.initial is not None else batch.max_seqs
    if not batch.min_seqs <= max_num_seqs <= batch.max_seqs:
        # The current limit comes from the controller's state and may predate a policy
        # change; clamp it into the policy's range rather than refuse to plan.
        clamped = min(max(max_num_seqs, batch.min_seqs), batch.max_seqs)
        notes.append(
            Note(
                F_MAX_BATCH,
                "InitialBatchClamped",
                f"batch limit {max_num_seqs} is outside [{batch.min_seqs}, {batch.max_seqs}]; "
                f"using {clamped}",
            )
        )
        max_num_seqs = clamped
    if prefs.max_num_batched_tokens is not None:
        mnbt = prefs.max_num_batched_tokens
    else:
        mnbt = default_max_num_batched_tokens(hw)
        if mnbt < max_num_seqs:
            mnbt = max_num_seqs
        notes.append(
            Note(
                F_MNBT,
                "ChunkedPrefillBudget",
                f"{mnbt} tokens per step: vLLM's API-server default for this GPU class "
                "(get_batch_defaults); it bounds prefill work per step and so inter-token "
                "latency",
            )
        )
    graphs: tuple[int, ...] = ()
    if hw.vendor == "intel":
        # Gaudi runs HPU graphs warmed up per batch bucket by the vllm-gaudi plugin, not
        # CUDA graphs, so no capture sizes are passed.
        notes.append(
            Note(
                "cudagraphCaptureSizes",
                "NotCUDA",
                "no CUDA-graph capture sizes on Intel Gaudi (HPU graphs use batch buckets)",
            )
        )
    else:
        graphs = cudagraph_capture_sizes(batch.max_seqs)

    generated = ["--model", model.name]
    if model.served_name:
        generated += ["--served-model-name", model.served_name]
    generated += ["--dtype", dtype]
    if quantization is not None:
        generated += ["--quantization", quantization]
    generated += ["--kv-cache-dtype", kv_dtype]
    generated += ["--tensor-parallel-size", str(chosen.tp)]
    if model.max_model_len is not None:
        generated += ["--max-model-len", str(model.max_model_len)]
    generated += ["--gpu-memory-utilization", f"{gmu:g}"]
    generated += ["--max-num-seqs", str(max_num_seqs)]
    generated += ["--max-num-batched-tokens", str(mnbt)]
    if graphs:
        generated += ["--cudagraph-capture-sizes", *(str(s) for s in graphs)]

    spec = VllmArgSpec.load()
    args, conflicts, user = _merge_extra(spec, generated, prefs.extra_args)

    # Effective values after user overrides (the user wins; estimates follow them). Each
    # overriding value goes through the rule of the spec field it stands for, and every
    # error names the extra argument the user wrote.
    def user_value(dest: str) -> str | None:
        uo = user.get(dest)
        return uo.values[-1] if uo is not None and uo.values else None

    def where(dest: str) -> str:
        return f"{F_EXTRA}[{user[dest].start}]"

    def user_checked(dest: str) -> int | float | None:
        raw = user_value(dest)
        if raw is None:
            return None
        return checked(dest, raw, where(dest), user[dest].flag)

    tp_source, mns_source, mnbt_source = F_TP, F_MAX_BATCH, F_MNBT
    if (v := user_checked("tensor_parallel_size")) is not None:
        tp, tp_source = int(v), where("tensor_parallel_size")
        if tp > 1 and not sharing.whole:
            raise EngineError(tp_source, f"{tp}: {_no_tp_reason(hw, sharing)}")
        if tp > gpus_per_node:
            raise EngineError(tp_source, f"{tp} exceeds the {gpus_per_node} GPUs per replica "
                              "of this pool")
        if not _heads_ok(model, tp):
            raise EngineError(tp_source, f"{tp} does not divide the model's {_heads_text(model)}")
    else:
        tp = chosen.tp
    if (v := user_checked("max_num_seqs")) is not None:
        max_num_seqs, mns_source = int(v), where("max_num_seqs")
    if (v := user_checked("max_num_batched_tokens")) is not None:
        mnbt, mnbt_source = int(v), where("max_num_batched_tokens")
    if mnbt < max_num_seqs:
        # vllm/config/scheduler.py: max_num_batched_tokens must be >= max_num_seqs.
        blame = mnbt_source if mnbt_source != F_MNBT or mns_source == F_MAX_BATCH else mns_source
        raise EngineError(blame, f"--max-num-batched-tokens {mnbt} is below --max-num-seqs "
                          f"{max_num_seqs}; vLLM rejects that")
    max_model_len = model.max_model_len
    raw_len = user_value("max_model_len")
    if raw_len is not None and raw_len.strip().lower() not in ("auto", "-1"):
        max_model_len = int(checked("max_model_len", raw_len, where("max_model_len"),
                                    user["max_model_len"].flag))
    elif raw_len is not None:
        max_model_len = None  # vLLM's own maximum for the model
    if (v := user_checked("gpu_memory_utilization")) is not None:
        gmu = float(v)
        if sharing.shared and gmu > 1.0 / sharing.replicas:
            notes.append(Note(where("gpu_memory_utilization"), "SharedGPUMemory",
                              f"{gmu:g} of the GPU's memory is more than a "
                              f"1/{sharing.replicas} share; other pods on the same GPU may "
                              "fail to start"))
    dtype = user_value("dtype") or dtype
    if "quantization" in user:
        quantization = user_value("quantization")
        bpp = _quant_bytes(quantization, 2.0 if model.quantized_checkpoint is None else bpp)
    if "kv_cache_dtype" in user:
        kv_dtype = user_value("kv_cache_dtype") or kv_dtype
        kv_bytes = 1.0 if kv_dtype in _FP8_KV else 2.0
    if "cudagraph_capture_sizes" in user:
        sizes = []
        for token in user["cudagraph_capture_sizes"].values:
            try:
                size = parse_count(token)
            except TooLarge:
                size = None
            if size is None or not 1 <= size <= MAX_GRAPH_SIZE:
                raise EngineError(where("cudagraph_capture_sizes"),
                                  f"--cudagraph-capture-sizes {token}: not an integer from 1 "
                                  f"to {MAX_GRAPH_SIZE}")
            sizes.append(size)
        graphs = tuple(sorted(set(sizes)))
    for dest in ("pipeline_parallel_size", "data_parallel_size"):
        given = user_value(dest)
        if given is not None and given.strip() != "1":
            # Each multiplies the GPUs one pod needs; the operator plans and requests
            # GPUs for tensor parallelism only.
            raise EngineError(where(dest), f"{user[dest].flag} {given}: only 1 is supported; "
                              f"set {F_TP} (one pod per replica, GPUs = tensor parallel)")

    final = chosen
    if conflicts:
        ctx = max_model_len if max_model_len is not None else DEFAULT_CONTEXT_TOKENS
        final = fit(
            tp=max(tp, 1),
            total_weight_gib=weight_gib(params, bpp),
            shape=shape,
            kv_bytes=kv_bytes,
            memory_gib=hw.memory_gib,
            gpu_memory_utilization=gmu,
            context_tokens=ctx,
            reserve_seqs=batch.min_seqs,
        )
        if not final.fits:
            notes.append(
                Note(
                    F_EXTRA,
                    "OverrideMayNotFit",
                    "with the extra args the model may not fit: "
                    f"{final.weight_gib_per_gpu:.1f} GiB weights and "
                    f"{final.kv_gib_per_gpu:.1f} GiB KV per GPU",
                )
            )
    if final.max_concurrent_seqs < max_num_seqs:
        notes.append(
            Note(
                F_MAX_BATCH,
                "KVCacheLimited",
                f"KV memory holds about {final.max_concurrent_seqs} sequences of {ctx} tokens, "
                f"below --max-num-seqs {max_num_seqs}; longer batches will queue or preempt",
            )
        )

    return EnginePlan(
        args=tuple(args),
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_dtype,
        tensor_parallel_size=tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        gpu_memory_utilization=gmu,
        max_model_len=max_model_len,
        cudagraph_capture_sizes=graphs,
        notes=tuple(notes),
        conflicts=tuple(conflicts),
        env=tuple(env),
        est_weight_gib_per_gpu=round(final.weight_gib_per_gpu, 2),
        est_kv_gib_per_gpu=round(final.kv_gib_per_gpu, 2),
        est_max_concurrent_seqs=final.max_concurrent_seqs,
    )
