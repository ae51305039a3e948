"""Hardware class + model + preferences -> ``vllm serve`` options.

The planner checks the input and composes the rules of its sibling modules: precision
(weights and KV cache), tensor parallelism, batching, and the user's overrides. Every rule
cites its source; ``docs/hardware-and-engine.md`` lists them in one place.
"""

from __future__ import annotations

from slo_operator.engine.batching import choose_batching
from slo_operator.engine.fields import (
    F_EXTRA,
    F_GMU,
    F_GPUS,
    F_MAX_BATCH,
    F_MAX_LEN,
    F_MIN_BATCH,
    F_NAME,
    F_PRODUCTS,
    F_SERVED,
    F_SIZE,
    F_TP,
)
from slo_operator.engine.overrides import EngineSettings, apply_overrides, merge_extra
from slo_operator.engine.parallel import MAX_TP_HINT, choose_tp, no_tp_reason
from slo_operator.engine.precision import cc_text, choose_kv_cache, choose_weights
from slo_operator.engine.sizing import DEFAULT_CONTEXT_TOKENS, fit, model_shape, weight_gib
from slo_operator.engine.types import (
    BatchBounds,
    EngineError,
    EnginePlan,
    EnginePrefs,
    GpuSharing,
    ModelFacts,
    Note,
)
from slo_operator.engine.vllm_args import VllmArgSpec
from slo_operator.hardware import HardwareClass
from slo_runtime.contract import CUDA_MIN_CC

# Below vLLM's own default (0.92 in the 0.32.0 serve-args capture) to leave room for the
# in-pod runtime gateway and allocator fragmentation.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90

# vLLM supports NVIDIA GPUs from compute capability 7.0 (docs/getting_started/
# installation/gpu: "GPU: compute capability 7.0 or higher"); the precision rules of
# slo_runtime.contract start there too.
MIN_CUDA_CC = CUDA_MIN_CC


def _check_inputs(
    hw: HardwareClass, gpus_per_node: int, model: ModelFacts, prefs: EnginePrefs, batch: BatchBounds
) -> tuple[float, float]:
    """Refuse input no plan can serve; return (parameters in billions, memory fraction)."""
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
            f"{hw.display_name} has {cc_text(hw)}; vLLM needs 7.0 or newer",
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


def _sharing_memory(
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
        # Whole thousandths, rounded down in integers (0.9 / 9 in floating point is just
        # below 0.1).
        gmu = (round(DEFAULT_GPU_MEMORY_UTILIZATION * 1000) // sharing.replicas) / 1000
    notes.append(Note(F_GMU, "SharedGPU", f"{hw.display_name} is time-sliced "
                      f"{sharing.replicas} ways: latency is not isolated from other pods on "
                      f"the GPU; vLLM gets --gpu-memory-utilization {gmu:g} (its share of "
                      "the memory) and tensor parallel 1"))
    if gmu > share:
        notes.append(Note(F_GMU, "SharedGPUMemory", f"{gmu:g} of the GPU's memory is more "
                          f"than a 1/{sharing.replicas} share; other pods on the same GPU "
                          "may fail to start"))
    return gmu


def _generated_args(model: ModelFacts, s: EngineSettings) -> list[str]:
    """The options the operator writes for the planned settings, before extra args."""
    generated = ["--model", model.name]
    if model.served_name:
        generated += ["--served-model-name", model.served_name]
    generated += ["--dtype", s.dtype]
    if s.quantization is not None:
        generated += ["--quantization", s.quantization]
    generated += ["--kv-cache-dtype", s.kv_cache_dtype]
    generated += ["--tensor-parallel-size", str(s.tensor_parallel_size)]
    if s.max_model_len is not None:
        generated += ["--max-model-len", str(s.max_model_len)]
    generated += ["--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}"]
    generated += ["--max-num-seqs", str(s.max_num_seqs)]
    generated += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
    if s.cudagraph_capture_sizes:
        generated += ["--cudagraph-capture-sizes", *(str(n) for n in s.cudagraph_capture_sizes)]
    return generated


def plan_engine(
    hw: HardwareClass,
    gpus_per_node: int,
    model: ModelFacts,
    prefs: EnginePrefs,
    batch: BatchBounds,
    sharing: GpuSharing | None = None,
) -> EnginePlan:
    """Choose vLLM options for one replica.

    Raises ``EngineError`` on invalid or infeasible input, naming the CRD field to change.
    ``sharing`` says whether the pool's GPUs are MIG slices or time-sliced: both get tensor
    parallel 1, and time-sliced GPUs a share of the memory.
    """
    sharing = sharing or GpuSharing()
    params, gmu = _check_inputs(hw, gpus_per_node, model, prefs, batch)
    notes: list[Note] = []
    gmu = _sharing_memory(hw, sharing, prefs, gmu, notes)
    # More GPUs than any TP size considered is no different from MAX_TP_HINT (and keeps the
    # divisor search bounded whatever a node label claims).
    tp_pool = min(gpus_per_node, MAX_TP_HINT) if sharing.whole else 1
    if not sharing.whole and (prefs.tensor_parallel_size or 1) > 1:
        raise EngineError(prefs.tensor_parallel_source,
                          f"{prefs.tensor_parallel_size}: {no_tp_reason(hw, sharing)}")

    dtype, quantization, bpp, env = choose_weights(hw, model, prefs, notes)
    kv_dtype, kv_bytes = choose_kv_cache(hw, prefs, dtype, notes)

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
    dtype_desc = f"{bpp * 8:g}-bit"
    try:
        chosen = choose_tp(
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
        raise EngineError(err.field, f"{err.message} ({no_tp_reason(hw, sharing)})") from None

    max_num_seqs, mnbt, graphs = choose_batching(hw, prefs, batch, notes)
    planned = EngineSettings(
        dtype=dtype,
        quantization=quantization,
        weight_bytes=bpp,
        kv_cache_dtype=kv_dtype,
        kv_bytes=kv_bytes,
        tensor_parallel_size=chosen.tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        gpu_memory_utilization=gmu,
        max_model_len=model.max_model_len,
        cudagraph_capture_sizes=graphs,
    )
    generated = _generated_args(model, planned)
    args, conflicts, user = merge_extra(VllmArgSpec.load(), generated, prefs.extra_args)
    # The user wins; the estimates follow the effective values.
    eff = apply_overrides(
        planned, user, gpus_per_node=gpus_per_node, model=model, sharing=sharing, hw=hw,
        notes=notes,
    )

    final = chosen
    if eff != planned:
        ctx = eff.max_model_len if eff.max_model_len is not None else DEFAULT_CONTEXT_TOKENS
        final = fit(
            tp=eff.tensor_parallel_size,
            total_weight_gib=weight_gib(params, eff.weight_bytes),
            shape=shape,
            kv_bytes=eff.kv_bytes,
            memory_gib=hw.memory_gib,
            gpu_memory_utilization=eff.gpu_memory_utilization,
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
    if final.max_concurrent_seqs < eff.max_num_seqs:
        notes.append(
            Note(
                F_MAX_BATCH,
                "KVCacheLimited",
                f"KV memory holds about {final.max_concurrent_seqs} sequences of {ctx} tokens, "
                f"below --max-num-seqs {eff.max_num_seqs}; longer batches will queue or preempt",
            )
        )

    return EnginePlan(
        args=tuple(args),
        dtype=eff.dtype,
        quantization=eff.quantization,
        kv_cache_dtype=eff.kv_cache_dtype,
        tensor_parallel_size=eff.tensor_parallel_size,
        max_num_seqs=eff.max_num_seqs,
        max_num_batched_tokens=eff.max_num_batched_tokens,
        gpu_memory_utilization=eff.gpu_memory_utilization,
        max_model_len=eff.max_model_len,
        cudagraph_capture_sizes=eff.cudagraph_capture_sizes,
        notes=tuple(notes),
        conflicts=tuple(conflicts),
        env=tuple(env),
        est_weight_gib_per_gpu=round(final.weight_gib_per_gpu, 2),
        est_kv_gib_per_gpu=round(final.kv_gib_per_gpu, 2),
        est_max_concurrent_seqs=final.max_concurrent_seqs,
    )
