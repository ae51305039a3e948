"""Inputs and outputs of the engine planner (plain frozen dataclasses).

The CRD models in ``slo_operator.api`` are mapped onto these by the caller; the value
tuples ``PRECISIONS`` and ``KV_CACHE_DTYPES`` are exported so the CRD enums can be checked
against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from slo_operator.engine.fields import F_TP

Precision = Literal["auto", "bf16", "fp16", "fp8"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16"]

PRECISIONS: tuple[str, ...] = get_args(Precision)
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KvCacheDtype)


@dataclass(frozen=True)
class ModelFacts:
    """What is known about the model.

    Missing layer/head facts are estimated from ``params_billion`` (see
    ``slo_operator.engine.sizing.model_shape``).
    """

    name: str
    served_name: str | None = None
    params_billion: float | None = None
    max_model_len: int | None = None
    num_layers: int | None = None
    num_kv_heads: int | None = None
    # Attention (query) heads: TP must divide them (Qwen2.5-7B: 28 heads, 4 KV heads).
    num_attention_heads: int | None = None
    head_dim: int | None = None
    # Quantization method of a pre-quantized checkpoint ("fp8", "awq", "gptq", ...);
    # vLLM reads it from the checkpoint config, so no --quantization is passed.
    quantized_checkpoint: str | None = None


@dataclass(frozen=True)
class EnginePrefs:
    """What the user and the policy ask of the engine."""

    precision: Precision = "auto"
    kv_cache_dtype: KvCacheDtype = "auto"
    tensor_parallel_size: int | None = None
    # The field the user set the tensor-parallel size with (errors name it).
    tensor_parallel_source: str = F_TP
    allow_quantization: bool = True
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    extra_args: tuple[str, ...] = ()
    # Intel Gaudi only: path of the Intel Neural Compressor measurement/quantization
    # config passed as QUANT_CONFIG; without it Gaudi runs BF16.
    quant_config: str | None = None


@dataclass(frozen=True)
class GpuSharing:
    """How the pool's GPUs are divided: MIG slices or time-sliced (or MPS) replicas.

    Neither can host tensor parallelism: NCCL has no peer-to-peer path between MIG
    instances, and two ranks on time-sliced replicas may land on the same physical GPU.
    ``replicas`` is how many pods share one physical GPU (``nvidia.com/gpu.replicas``).
    """

    mig: bool = False
    replicas: int = 1

    @property
    def shared(self) -> bool:
        return self.replicas > 1

    @property
    def whole(self) -> bool:
        return not self.mig and not self.shared


@dataclass(frozen=True)
class ChunkBudget:
    """A chunked-prefill budget (``--max-num-batched-tokens``) chosen by the caller for an
    inter-token objective or a jitter bound, and what it was chosen from (the planner only
    reports them).

    ``step_ms`` is the estimated longest step with this budget: a full prompt chunk while
    ``decode_batch`` sequences decode; ``fits`` is False when even the smallest budget
    considered misses the inter-token objective (``itl_target_ms``; None: none set);
    ``basis`` says where the step times came from. ``jitter_max``, ``jitter_measured``:
    where the budget is below the inter-token one (or vLLM's default) for the jitter bound,
    the bound and the jitter measured over it that lowered it.
    """

    tokens: int
    itl_target_ms: float | None
    step_ms: float
    decode_batch: int
    fits: bool = True
    basis: str = "seed step times"
    jitter_max: float | None = None
    jitter_measured: float | None = None


@dataclass(frozen=True)
class BatchBounds:
    """Batch limits the controller may choose (``--max-num-seqs``), and the chunked-prefill
    budget chosen for the policy's inter-token objective (``chunk``; None: vLLM's default)."""

    min_seqs: int = 1
    max_seqs: int = 256
    initial: int | None = None
    chunk: ChunkBudget | None = None


@dataclass(frozen=True)
class Note:
    """Why a setting was chosen, or a user override.

    ``field`` is a CRD path or an engine option name; ``reason`` is a CamelCase constant.
    """

    field: str
    reason: str
    message: str


class EngineError(Exception):
    """Invalid or infeasible input. ``field`` names the CRD path to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class EnginePlan:
    """The ``vllm serve`` options for one replica, and why.

    ``args`` start with ``--model <name>`` (no leading ``vllm serve``) and already include
    the user's extra args, which win over generated ones (each reported in ``conflicts``).
    The scalar fields give the effective values after those overrides.
    """

    args: tuple[str, ...]
    dtype: str
    quantization: str | None
    kv_cache_dtype: str
    tensor_parallel_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int | None
    cudagraph_capture_sizes: tuple[int, ...]
    notes: tuple[Note, ...]
    conflicts: tuple[Note, ...]
    env: tuple[tuple[str, str], ...]
    est_weight_gib_per_gpu: float
    est_kv_gib_per_gpu: float
    est_max_concurrent_seqs: int
