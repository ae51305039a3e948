"""Tensor parallelism: how many GPUs one replica spreads the model over.

The smallest power of two whose shards fit the weights and the reserved KV cache, and
that divides the model's attention and KV heads; a user's size is checked by the same
rules. Shared GPUs (MIG slices, time-sliced replicas) get tensor parallel 1.
"""

from __future__ import annotations

from slo_operator.engine.fields import F_GPUS, F_SIZE, F_TP
from slo_operator.engine.sizing import Fit, ModelShape, fit
from slo_operator.engine.types import EngineError, EnginePrefs, GpuSharing, ModelFacts, Note
from slo_operator.hardware import HardwareClass

# Largest TP size considered when telling the user how many GPUs a model would need.
MAX_TP_HINT = 64


def no_tp_reason(hw: HardwareClass, sharing: GpuSharing) -> str:
    """Say why a shared GPU (a MIG slice or time-sliced) cannot run tensor parallel."""
    if sharing.mig:
        return (f"{hw.display_name} is a MIG slice; vLLM cannot run tensor parallel across "
                "MIG instances (NCCL has no peer-to-peer path between them): use 1, or a "
                "larger MIG profile or whole GPUs")
    return (f"{hw.display_name} is time-sliced {sharing.replicas} ways; tensor-parallel ranks "
            "could share one physical GPU: use 1, or whole GPUs")


def heads_ok(model: ModelFacts, tp: int) -> bool:
    """Tell whether vLLM accepts tensor parallel ``tp`` for the model's heads.

    vLLM shards KV heads when TP divides them and replicates them when they divide TP
    (vllm/model_executor/layers/linear.py QKVParallelLinear), and refuses a TP size that
    does not divide the attention heads (vllm/config/model.py verify_with_parallel_config:
    "Total number of attention heads must be divisible by tensor parallel size").
    """
    heads = model.num_attention_heads
    if heads is not None and heads % tp != 0:
        return False
    kv = model.num_kv_heads
    if kv is None:
        return True
    return kv % tp == 0 or tp % kv == 0


def heads_text(model: ModelFacts) -> str:
    """Name the model's head counts a TP size must divide ("32 attention heads and 8 KV heads")."""
    parts = []
    if model.num_attention_heads is not None:
        parts.append(f"{model.num_attention_heads} attention heads")
    if model.num_kv_heads is not None:
        parts.append(f"{model.num_kv_heads} KV heads")
    return " and ".join(parts) or "heads"


def _powers_of_two(limit: int) -> list[int]:
    """Powers of two from 1 up to ``limit`` (none below 1)."""
    return [1 << i for i in range(max(limit, 0).bit_length())]


def choose_tp(
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
    """Choose the tensor-parallel size: the user's, checked, or the smallest that fits.

    Candidates are powers of two up to ``gpus_per_node`` that divide the model's heads;
    the fit is weights plus KV for ``reserve_seqs`` sequences of ``ctx`` tokens. Raises
    ``EngineError`` naming what to change when none fits.
    """

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
        if not heads_ok(model, tp):
            raise EngineError(
                src,
                f"{tp} does not divide the model's {heads_text(model)} (KV heads may also "
                "be a divisor of it)",
            )
        f = at(tp)
        if not f.fits:
            raise EngineError(src, f"model does not fit: {shortfall(f)}")
        return f

    candidates = [tp for tp in _powers_of_two(gpus_per_node) if heads_ok(model, tp)]
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
    # Every size up to the pool's that the heads allow was tried above and does not fit.
    more = [tp for tp in _powers_of_two(MAX_TP_HINT) if heads_ok(model, tp) and at(tp).fits]
    detail = shortfall(at(candidates[-1])) if candidates else "no TP size divides the KV heads"
    hint = ""
    if prefs.precision == "auto" and hw.fp8_compute and not prefs.allow_quantization:
        hint = "; FP8 weights would halve the weight memory if the policy allowed quantization"
    blocked = [
        tp for tp in _powers_of_two(gpus_per_node) if not heads_ok(model, tp) and at(tp).fits
    ]
    if blocked:
        divisors = [d for d in range(1, gpus_per_node + 1) if heads_ok(model, d)]
        raise EngineError(
            F_TP,
            f"TP {blocked[0]} would fit in memory but does not divide the model's "
            f"{heads_text(model)}; set tensorParallelSize to one of "
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

