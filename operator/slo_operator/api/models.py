"""Pydantic models of the two custom resources.

These models are the single source of truth for the API: the CRD YAML in ``crds/`` is
generated from them (``slo-operator crds``) and a test holds the two equal. Cross-field
rules are written twice on purpose: once as CEL (``x-kubernetes-validations``) so the API
server rejects nonsense at ``kubectl apply`` time, and once as pydantic validators so
``slo-operator render`` and the reconciler give the same message offline.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

GROUP = "inference.slo-operator.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Kept equal to slo_operator.engine's PRECISIONS / KV_CACHE_DTYPES by a unit test.
Precision = Literal["auto", "bf16", "fp16", "fp8"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16"]
BatchingMode = Literal["live", "restart", "off"]

DURATION_PATTERN = r"^[0-9]+(s|m|h)$"
_DURATION_RE = re.compile(DURATION_PATTERN)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def parse_duration(value: str) -> int:
    """Seconds in a duration such as ``60s``, ``5m`` or ``1h``."""
    if not _DURATION_RE.match(value):
        raise ValueError(f"{value!r} is not a duration like 60s, 5m or 1h")
    return int(value[:-1]) * _DURATION_UNITS[value[-1]]


def _cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    out: JsonDict = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


class _Model(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class _Status(BaseModel):
    """Status models accept what other writers (older versions) left behind."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


# ---------------------------------------------------------------------------- SLOPolicy


class Objectives(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.interTokenLatencyMs) || self.interTokenLatencyMs < "
                    "self.e2eLatencyP99Ms",
                    "spec.objectives.interTokenLatencyMs must be below "
                    "spec.objectives.e2eLatencyP99Ms",
                    ".interTokenLatencyMs",
                ),
            ]
        }
    )

    e2e_latency_p99_ms: Annotated[int, Field(gt=0, le=3_600_000)] = Field(
        default=800,
        alias="e2eLatencyP99Ms",
        description="End-to-end request latency target in milliseconds at e2ePercentile.",
    )
    e2e_percentile: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.99, alias="e2ePercentile", description="Percentile of e2e latency, in (0,1)."
    )
    ttft_p95_ms: Annotated[int, Field(gt=0, le=3_600_000)] = Field(
        default=300,
        alias="ttftP95Ms",
        description="Time-to-first-token target in milliseconds at ttftPercentile.",
    )
    ttft_percentile: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.95, description="Percentile of time to first token, in (0,1)."
    )
    throughput_cv_max: Annotated[float, Field(gt=0, le=10)] = Field(
        default=0.15,
        alias="throughputCVMax",
        description=(
            "Largest allowed service instability: coefficient of variation of per-request "
            "decode rate within a window (not the CV of demand, which scaling cannot fix)."
        ),
    )
    inter_token_latency_ms: Annotated[int, Field(gt=0, le=600_000)] | None = Field(
        default=None,
        description="Optional inter-token latency target (length-free alternative to e2e).",
    )
    inter_token_percentile: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.99, description="Percentile of inter-token latency, in (0,1)."
    )

    @model_validator(mode="after")
    def _itl_below_e2e(self) -> Objectives:
        if (
            self.inter_token_latency_ms is not None
            and self.inter_token_latency_ms >= self.e2e_latency_p99_ms
        ):
            raise ValueError(
                "spec.objectives.interTokenLatencyMs must be below spec.objectives.e2eLatencyP99Ms"
            )
        return self


class Scaling(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.minReplicas <= self.maxReplicas",
                    "spec.scaling.minReplicas must be <= spec.scaling.maxReplicas",
                    ".minReplicas",
                ),
                _cel(
                    "self.minReplicas > 0 || self.scaleToZero",
                    "spec.scaling.minReplicas may be 0 only with spec.scaling.scaleToZero: true",
                    ".minReplicas",
                ),
            ]
        }
    )

    min_replicas: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=1, description="Fewest replicas (0 only with scaleToZero)."
    )
    max_replicas: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=8, description="Most replicas."
    )
    scale_up_stabilization: str = Field(
        default="0s",
        pattern=DURATION_PATTERN,
        description="Window over which the highest recommendation is used before scaling up.",
    )
    scale_down_stabilization: str = Field(
        default="300s",
        pattern=DURATION_PATTERN,
        description="Window over which the highest recommendation is used before scaling down.",
    )
    max_scale_up_step: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=4, description="Most replicas added in one decision."
    )
    max_scale_down_step: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=1, description="Most replicas removed in one decision."
    )
    scale_to_zero: bool = Field(default=False, description="Allow zero replicas when idle.")

    @model_validator(mode="after")
    def _bounds(self) -> Scaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"spec.scaling.minReplicas ({self.min_replicas}) must be <= "
                f"spec.scaling.maxReplicas ({self.max_replicas})"
            )
        if self.min_replicas == 0 and not self.scale_to_zero:
            raise ValueError(
                "spec.scaling.minReplicas may be 0 only with spec.scaling.scaleToZero: true"
            )
        return self


class Batching(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.minBatch <= self.maxBatch",
                    "spec.batching.minBatch must be <= spec.batching.maxBatch",
                    ".minBatch",
                ),
            ]
        }
    )

    mode: BatchingMode = Field(
        default="live",
        description=(
            "live: the in-pod gateway enforces the limit without restarts; restart: change "
            "vLLM's --max-num-seqs with a rolling restart; off: never change the limit."
        ),
    )
    min_batch: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=8, description="Smallest in-flight limit per replica."
    )
    max_batch: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=256, description="Largest in-flight limit per replica (vLLM --max-num-seqs)."
    )

    @model_validator(mode="after")
    def _bounds(self) -> Batching:
        if self.min_batch > self.max_batch:
            raise ValueError(
                f"spec.batching.minBatch ({self.min_batch}) must be <= "
                f"spec.batching.maxBatch ({self.max_batch})"
            )
        return self


class SLOPolicySpec(_Model):
    objectives: Objectives = Field(default_factory=Objectives)
    window: str = Field(
        default="60s", pattern=DURATION_PATTERN, description="Length of one SLO window."
    )
    attainment_target: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.99, description="Fraction of good windows required over attainmentPeriod."
    )
    attainment_period: str = Field(
        default="1h", pattern=DURATION_PATTERN, description="Rolling period for attainment."
    )
    scaling: Scaling = Field(default_factory=Scaling)
    batching: Batching = Field(default_factory=Batching)
    priority: Annotated[int, Field(ge=0, le=1_000_000)] = Field(
        default=0, description="Higher priority services get scarce GPUs first."
    )
    gpu_budget: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None, description="Most GPUs all services bound to this policy may use together."
    )
    allow_quantization: bool = Field(
        default=True, description="false forbids FP8 weights and FP8 KV cache for this tenant."
    )
    tenant: str | None = Field(
        default=None,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="Tenant name used in metric labels; defaults to the namespace.",
    )


class Condition(_Status):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class SLOPolicyStatus(_Status):
    observed_generation: int | None = None
    bound_services: list[str] = Field(default_factory=list)
    bound_count: int | None = None
    attainment: float | None = None
    error_budget_remaining: float | None = None
    conditions: list[Condition] = Field(default_factory=list)


# ---------------------------------------------------------------------------- InferenceService


class ModelSpec(_Model):
    name: str = Field(
        min_length=1,
        max_length=512,
        description="Model to serve: a Hugging Face id or a path inside the image/volume.",
    )
    served_name: str | None = Field(
        default=None, max_length=253, description="Name clients send in the 'model' field."
    )
    size_billions: Annotated[float, Field(gt=0, le=10_000)] = Field(
        description="Parameter count in billions; sizes tensor parallelism and memory."
    )
    max_model_len: Annotated[int, Field(ge=16, le=10_000_000)] | None = Field(
        default=None, description="Longest context (prompt + output) in tokens."
    )
    num_layers: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, description="Transformer layers (refines KV-cache sizing)."
    )
    num_kv_heads: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, alias="numKVHeads", description="KV heads (refines KV-cache sizing)."
    )
    head_dim: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, description="Attention head dimension (refines KV-cache sizing)."
    )
    quantized_checkpoint: str | None = Field(
        default=None,
        max_length=64,
        description="Set when the checkpoint is already quantized (e.g. fp8, awq).",
    )


class EnvVar(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str = Field(default="", max_length=32768)


class EngineSpec(_Model):
    image: str = Field(
        default="vllm/vllm-openai:v0.32.0", min_length=1, max_length=512,
        description="vLLM container image.",
    )
    precision: Precision = Field(
        default="auto",
        description="auto picks FP8 weights only where the GPU runs FP8 natively.",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto", description="KV-cache dtype; auto picks fp8 where it is safe."
    )
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="Override the tensor-parallel size derived from model bytes."
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    extra_args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list,
        max_length=128,
        description="Extra vllm serve arguments; they win over generated ones.",
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=128)


class Toleration(_Model):
    key: str | None = Field(default=None, max_length=316)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(default=None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class HardwareSpec(_Model):
    gpu_products: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=32,
        description="Preferred GPU products in order (e.g. H100, A100-80GB); empty means any.",
    )
    gpus_per_replica: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="GPUs per replica; derived from the model when unset."
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, description="Extra node labels every replica's node must carry."
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)


class ReplicaBounds(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.min) || !has(self.max) || self.min <= self.max",
                    "spec.replicas.min must be <= spec.replicas.max",
                    ".min",
                ),
            ]
        }
    )

    min: Annotated[int, Field(ge=0, le=1000)] | None = None
    max: Annotated[int, Field(ge=1, le=1000)] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> ReplicaBounds:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(
                f"spec.replicas.min ({self.min}) must be <= spec.replicas.max ({self.max})"
            )
        return self


class PolicyRef(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class InferenceServiceSpec(_Model):
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    hardware: HardwareSpec = Field(default_factory=HardwareSpec)
    slo_policy_ref: PolicyRef | None = Field(
        default=None, description="SLOPolicy in the same namespace."
    )
    replicas: ReplicaBounds = Field(
        default_factory=ReplicaBounds, description="Bounds that narrow the policy's scaling."
    )


class HardwareStatus(_Status):
    vendor: str | None = None
    product: str | None = None
    architecture: str | None = None
    compute_capability: str | None = None
    memory_gi_b: float | None = Field(default=None, alias="memoryGiB")
    gpus_per_replica: int | None = None
    fp8: bool | None = None


class ObservedStatus(_Status):
    e2e_p99_ms: float | None = Field(default=None, alias="e2eP99Ms")
    ttft_ms: float | None = None
    inter_token_ms: float | None = None
    throughput_cv: float | None = Field(default=None, alias="throughputCV")
    request_rate: float | None = None
    queue: float | None = None
    kv_cache_usage: float | None = None
    time: str | None = None


class DecisionRecord(_Status):
    time: str
    replicas: int
    batch_limit: int | None = None
    reason: str
    message: str = ""


class InferenceServiceStatus(_Status):
    observed_generation: int | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    desired_replicas: int | None = None
    hardware: HardwareStatus | None = None
    engine_args: list[str] = Field(default_factory=list)
    engine_notes: list[str] = Field(default_factory=list)
    batch_limit: int | None = None
    observed: ObservedStatus | None = None
    slo_compliant: bool | None = Field(default=None, alias="sloCompliant")
    attainment: float | None = None
    last_decisions: list[DecisionRecord] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)


def dump(model: BaseModel) -> dict[str, Any]:
    """Wire form: camelCase keys, no nulls."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")
