"""Memory arithmetic for the engine planner: weights, KV cache, overhead per GPU.

These are planning estimates, not measurements; the runtime probe measures the real
numbers on the node. Each constant says where it comes from.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

GIB = float(1024**3)

# Context length assumed when the service does not set spec.model.maxModelLen. vLLM then
# uses the model's own maximum, which the operator cannot read; 8192 tokens is a typical
# serving window and keeps the plan honest for the common case.
DEFAULT_CONTEXT_TOKENS = 8192

# Llama-family shapes used to estimate missing layer counts from the parameter count
# (published config.json of Llama-3.2-1B/3B, Llama-3.1-8B/70B/405B, Qwen2.5-14B/32B):
# (params in billions, num_hidden_layers). All use 8 KV heads (grouped-query attention)
# and head_dim 128 (Llama-3.2-1B uses 64; 128 over-estimates its KV, which is safe).
_LAYER_ANCHORS: tuple[tuple[float, int], ...] = (
    (1.0, 16),
    (3.0, 28),
    (8.0, 32),
    (14.0, 48),
    (32.0, 64),
    (70.0, 80),
    (405.0, 126),
)
DEFAULT_KV_HEADS = 8
DEFAULT_HEAD_DIM = 128

# Memory per GPU outside weights and KV cache: CUDA context, CUDA graphs, activation peak
# of the profiling run at the chunked-prefill budget, NCCL buffers when sharded. vLLM
# counts all of it inside --gpu-memory-utilization (vllm/v1/worker/gpu_worker.py
# determine_available_memory: KV gets what is left after the profile run).
BASE_OVERHEAD_GIB = 1.5
TP_OVERHEAD_GIB = 0.5

# Bytes per parameter of a pre-quantized checkpoint, by quantization method name.
_CHECKPOINT_BYTES: dict[str, float] = {
    "fp8": 1.0,
    "fbgemm_fp8": 1.0,
    "fp8_per_tensor": 1.0,
    "fp8_per_block": 1.0,
    "fp8_per_channel": 1.0,
    "modelopt": 1.0,
    "modelopt_mxfp8": 1.0,
    "mxfp8": 1.0,
    "experts_int8": 1.0,
    "int8": 1.0,
    "w8a8": 1.0,
    "compressed-tensors": 1.0,
    "awq": 0.5,
    "auto_awq": 0.5,
    "awq_marlin": 0.5,
    "gptq": 0.5,
    "auto_gptq": 0.5,
    "gptq_marlin": 0.5,
    "int4": 0.5,
    "mxfp4": 0.5,
    "gpt_oss_mxfp4": 0.5,
    "modelopt_fp4": 0.5,
    "nvfp4": 0.5,
    "moe_wna16": 0.5,
    "bitsandbytes": 0.5,
}

# Parameters that stay at 16 bits when the rest is quantized (embeddings, lm_head, norms;
# vLLM's online FP8 skips lm_head: docs/features/quantization/fp8.md), plus scales.
_WEIGHT_OVERHEAD = {2.0: 1.02, 1.0: 1.10, 0.5: 1.25}


@dataclass(frozen=True)
class ModelShape:
    """Layers, KV heads and head size of a model (estimated when not given)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    estimated: bool


def estimate_layers(params_billion: float) -> int:
    """Layer count interpolated on log(params) between the Llama-family anchors."""
    pts = _LAYER_ANCHORS
    if params_billion <= pts[0][0]:
        return pts[0][1]
    for (p0, l0), (p1, l1) in itertools.pairwise(pts):
        if params_billion <= p1:
            t = (math.log(params_billion) - math.log(p0)) / (math.log(p1) - math.log(p0))
            return round(l0 + t * (l1 - l0))
    return pts[-1][1]


def model_shape(
    params_billion: float,
    num_layers: int | None,
    num_kv_heads: int | None,
    head_dim: int | None,
) -> ModelShape:
    """Build the model's shape: given facts win, missing ones are estimated (module constants)."""
    estimated = num_layers is None or num_kv_heads is None or head_dim is None
    return ModelShape(
        num_layers=num_layers if num_layers is not None else estimate_layers(params_billion),
        num_kv_heads=num_kv_heads if num_kv_heads is not None else DEFAULT_KV_HEADS,
        head_dim=head_dim if head_dim is not None else DEFAULT_HEAD_DIM,
        estimated=estimated,
    )


def checkpoint_bytes_per_param(method: str) -> float | None:
    """Bytes per weight of a quantized checkpoint method; None if unknown."""
    return _CHECKPOINT_BYTES.get(method.strip().lower())


def weight_gib(params_billion: float, bytes_per_param: float) -> float:
    """Whole-model weight memory including the parts kept at 16 bits."""
    factor = _WEIGHT_OVERHEAD.get(bytes_per_param, 1.0)
    return params_billion * 1e9 * bytes_per_param * factor / GIB


def kv_heads_per_gpu(num_kv_heads: int, tp: int) -> int:
    """Count the KV heads one tensor-parallel rank holds.

    vLLM replicates KV heads when TP exceeds them (vllm/model_executor/layers/linear.py
    QKVParallelLinear: num_kv_heads = max(1, total_num_kv_heads // tp_size)).
    """
    return max(1, num_kv_heads // tp)


def kv_bytes_per_token_per_gpu(shape: ModelShape, tp: int, kv_bytes: float) -> float:
    """K and V, every layer, this rank's heads."""
    return (
        2.0
        * shape.num_layers
        * kv_heads_per_gpu(shape.num_kv_heads, tp)
        * shape.head_dim
        * (kv_bytes)
    )


def overhead_gib(tp: int) -> float:
    """Memory per GPU outside weights and KV cache (activations, CUDA graphs)."""
    return BASE_OVERHEAD_GIB + (TP_OVERHEAD_GIB if tp > 1 else 0.0)


@dataclass(frozen=True)
class Fit:
    """Whether a model fits a tensor-parallel size, and the memory it leaves for KV."""

    tp: int
    weight_gib_per_gpu: float
    kv_gib_per_gpu: float
    kv_reserve_gib_per_gpu: float
    max_concurrent_seqs: int

    @property
    def fits(self) -> bool:
        return self.kv_gib_per_gpu >= self.kv_reserve_gib_per_gpu and self.kv_gib_per_gpu > 0


def fit(
    *,
    tp: int,
    total_weight_gib: float,
    shape: ModelShape,
    kv_bytes: float,
    memory_gib: float,
    gpu_memory_utilization: float,
    context_tokens: int,
    reserve_seqs: int,
) -> Fit:
    """Memory left for KV per GPU at this TP size, and what it holds.

    Feasible when the KV left can hold ``reserve_seqs`` sequences of ``context_tokens``
    (vLLM refuses to start when the KV cache cannot hold one max_model_len sequence:
    vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory).
    """
    w = total_weight_gib / tp
    budget = memory_gib * gpu_memory_utilization
    kv = max(budget - w - overhead_gib(tp), 0.0)
    per_token = kv_bytes_per_token_per_gpu(shape, tp, kv_bytes)
    per_seq_gib = per_token * context_tokens / GIB
    reserve = per_seq_gib * reserve_seqs
    seqs = int(kv // per_seq_gib) if per_seq_gib > 0 else 0
    return Fit(
        tp=tp,
        weight_gib_per_gpu=w,
        kv_gib_per_gpu=kv,
        kv_reserve_gib_per_gpu=reserve,
        max_concurrent_seqs=seqs,
    )
