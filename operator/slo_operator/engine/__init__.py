"""Hardware class + model + preferences -> vLLM engine arguments.

Pure: no Kubernetes client, no clock; the only I/O is reading packaged data (the
captured ``vllm serve`` parser).
"""

from slo_operator.engine.batching import (
    BATCHED_TOKENS_LARGE_GPU,
    BATCHED_TOKENS_OTHER,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
)
from slo_operator.engine.plan import DEFAULT_GPU_MEMORY_UTILIZATION, plan_engine
from slo_operator.engine.sizing import DEFAULT_CONTEXT_TOKENS, estimate_layers
from slo_operator.engine.types import (
    KV_CACHE_DTYPES,
    PRECISIONS,
    BatchBounds,
    ChunkBudget,
    EngineError,
    EnginePlan,
    EnginePrefs,
    GpuSharing,
    KvCacheDtype,
    ModelFacts,
    Note,
    Precision,
)
from slo_operator.engine.vllm_args import (
    ArgAction,
    ParsedOption,
    Problem,
    VllmArgSpec,
    sets_option,
    validate,
    validate_extra_args,
)

__all__ = [
    "BATCHED_TOKENS_LARGE_GPU",
    "BATCHED_TOKENS_OTHER",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "KV_CACHE_DTYPES",
    "PRECISIONS",
    "ArgAction",
    "BatchBounds",
    "ChunkBudget",
    "EngineError",
    "EnginePlan",
    "EnginePrefs",
    "GpuSharing",
    "KvCacheDtype",
    "ModelFacts",
    "Note",
    "ParsedOption",
    "Precision",
    "Problem",
    "VllmArgSpec",
    "cudagraph_capture_sizes",
    "default_max_num_batched_tokens",
    "estimate_layers",
    "plan_engine",
    "sets_option",
    "validate",
    "validate_extra_args",
]
