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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from slo_runtime import contract

# The API group: one home, shared with the in-pod runtime (labels, annotations).
GROUP = contract.GROUP
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Kept equal to slo_operator.engine's PRECISIONS / KV_CACHE_DTYPES by a unit test.
Precision = Literal["auto", "bf16", "fp16", "fp8"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16"]
BatchingMode = Literal["live", "restart", "off"]

DURATION_PATTERN = r"^[0-9]+(s|m|h)$"
# Durations the apiserver's CEL rules compare: at most six digits (999999h, 114 years,
# still fits the Go duration CEL parses them into; a longer one overflows it), and a
# length bound that keeps the rules' estimated cost small.
BOUNDED_DURATION_PATTERN = r"^[0-9]{1,6}(s|m|h)$"
DURATION_MAX_LENGTH = 16
_DURATION_RE = re.compile(DURATION_PATTERN)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# k8s.io/apimachinery validation: IsValidLabelValue, IsQualifiedName (label keys, taint keys).
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_QUALIFIED_NAME_RE = re.compile(QUALIFIED_NAME_PATTERN)
# Model and served names become `vllm serve` argument values; argparse reads a leading
# "-" as an option.
ARG_VALUE_PATTERN = r"^[^-\s]"
# Environment variables the operator sets in the vLLM container (render.objects) and the
# planner's QUANT_CONFIG; a user's env may not repeat them, nor use the runtime's SLO_
# prefix (server-side apply refuses duplicate keys in the env list).
OPERATOR_ENV_PREFIX = "SLO_"
OPERATOR_ENV_NAMES = ("PYTHONPATH", "POD_NAME", "POD_NAMESPACE", "HOME", "QUANT_CONFIG")


def parse_duration(value: str) -> int:
    """Seconds in a duration such as ``60s``, ``5m`` or ``1h``."""
    if not _DURATION_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a duration like 60s, 5m or 1h")
    return int(value[:-1]) * _DURATION_UNITS[value[-1]]


def _cel(rule: str, message: str, field_path: str) -> JsonDict:
    """A CEL rule with the message and the field (relative path) ``kubectl`` shows."""
    return {"rule": rule, "message": message, "fieldPath": field_path}


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
    """What a good SLO window is: latency and jitter targets, each at a percentile. A window is
    good when every target is met.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.interTokenLatencyMs) || self.interTokenLatencyMs < "
                    "self.e2eLatencyMs",
                    "spec.objectives.interTokenLatencyMs must be below "
                    "spec.objectives.e2eLatencyMs",
                    ".interTokenLatencyMs",
                ),
            ]
        }
    )

    e2e_latency_ms: Annotated[int, Field(gt=0, le=3_600_000)] = Field(
        default=800,
        alias="e2eLatencyMs",
        description="End-to-end request latency target in milliseconds at e2ePercentile; "
        "default 800.",
    )
    e2e_percentile: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.99, alias="e2ePercentile",
        description="Percentile of end-to-end latency the target applies to, a fraction in "
        "(0,1); default 0.99."
    )
    ttft_ms: Annotated[int, Field(gt=0, le=3_600_000)] = Field(
        default=300,
        alias="ttftMs",
        description="Time-to-first-token target in milliseconds at ttftPercentile; default 300.",
    )
    ttft_percentile: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.95,
        description="Percentile of time to first token the target applies to, a fraction in "
        "(0,1); default 0.95."
    )
    throughput_cv_max: Annotated[float, Field(gt=0, le=10)] | None = Field(
        default=None,
        alias="throughputCVMax",
        description=(
            "Optional largest allowed service instability: coefficient of variation of "
            "per-request decode rate within a window (not the CV of demand, which scaling "
            "cannot fix); a ratio. Unset: jitter is measured and reported "
            "(status.observed.throughputCV) but judges no window."
        ),
    )
    inter_token_latency_ms: Annotated[int, Field(gt=0, le=600_000)] | None = Field(
        default=None,
        description="Optional inter-token latency target in milliseconds at "
        "interTokenPercentile (a length-free alternative to the e2e target); unset: none.",
    )
    inter_token_percentile: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.99,
        description="Percentile of inter-token latency the target applies to, a fraction in "
        "(0,1); default 0.99."
    )

    @model_validator(mode="after")
    def _itl_below_e2e(self) -> Objectives:
        if (
            self.inter_token_latency_ms is not None
            and self.inter_token_latency_ms >= self.e2e_latency_ms
        ):
            raise ValueError(
                "spec.objectives.interTokenLatencyMs must be below spec.objectives.e2eLatencyMs"
            )
        return self


class Scaling(_Model):
    """How far and how fast the operator may change the replica count of each bound service."""

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
        default=1, description="Fewest replicas per service (0 only with scaleToZero); default 1."
    )
    max_replicas: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=8, description="Most replicas per service; default 8."
    )
    scale_up_stabilization: str = Field(
        default="0s",
        pattern=DURATION_PATTERN,
        description="Stabilization window before scaling up, as a duration (e.g. 30s): "
        "recommendations within it are combined before adding replicas; default 0s (at once).",
    )
    scale_down_stabilization: str = Field(
        default="300s",
        pattern=DURATION_PATTERN,
        description="Stabilization window before scaling down, as a duration: the highest "
        "recommendation within it is used, so load dips do not remove replicas; default 300s.",
    )
    max_scale_up_step: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=4, description="Most replicas added in one decision; default 4."
    )
    max_scale_down_step: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=1, description="Most replicas removed in one decision; default 1."
    )
    scale_to_zero: bool = Field(
        default=False,
        description="Scale to zero replicas after idleBeforeZero without requests; the "
        "activator holds the next request and wakes the service (a cold start); default false.")
    idle_before_zero: str | None = Field(
        default=None,
        pattern=DURATION_PATTERN,
        description="With scaleToZero: how long the service must see no request (none "
        "arriving, running or finishing over the policy window) before it goes to zero, as "
        "a duration; default the longer of window and scaleDownStabilization.")

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
    """How the operator moves each replica's in-flight request limit (batch limit)."""

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
            "vLLM's --max-num-seqs with a rolling restart; off: never change the limit. Default "
            "live."
        ),
    )
    min_batch: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=8, description="Smallest in-flight request limit per replica (requests); default 8."
    )
    max_batch: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=256, description="Largest in-flight request limit per replica (requests; vLLM "
        "--max-num-seqs is pinned to it); default 256."
    )

    @model_validator(mode="after")
    def _bounds(self) -> Batching:
        if self.min_batch > self.max_batch:
            raise ValueError(
                f"spec.batching.minBatch ({self.min_batch}) must be <= "
                f"spec.batching.maxBatch ({self.max_batch})"
            )
        return self


# The shortest SLO window: a rate over it needs two scrapes inside it (5 s covers a fast
# scrape of 2 s; the chart's Prometheus scrapes every 15 s, for which 60 s is the default).
MIN_WINDOW_S = 5
# The defaults of spec.window and spec.attainmentPeriod (the CEL rule comparing them reads
# an absent field as its default).
DEFAULT_WINDOW = "60s"
DEFAULT_ATTAINMENT_PERIOD = "1h"


class SLOPolicySpec(_Model):
    """Service-level objectives and the scaling, batching and GPU rules for every InferenceService
    that names this policy in spec.sloPolicyRef. Every field has a default; an empty spec is a
    valid policy.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    f"!has(self.window) || duration(self.window) >= "
                    f"duration('{MIN_WINDOW_S}s')",
                    f"spec.window must be at least {MIN_WINDOW_S}s",
                    ".window",
                ),
                _cel(
                    "duration(has(self.attainmentPeriod) ? self.attainmentPeriod : "
                    f"'{DEFAULT_ATTAINMENT_PERIOD}') >= "
                    f"duration(has(self.window) ? self.window : '{DEFAULT_WINDOW}')",
                    "spec.attainmentPeriod must be at least spec.window",
                    ".attainmentPeriod",
                ),
            ]
        }
    )

    objectives: Objectives = Field(
        default_factory=Objectives,
        description="Latency and jitter targets; defaults: e2e P99 800 ms, TTFT P95 300 ms, "
        "no jitter objective.",
    )
    window: str = Field(
        default=DEFAULT_WINDOW, pattern=BOUNDED_DURATION_PATTERN, max_length=DURATION_MAX_LENGTH,
        description="Length of one SLO window, as a duration (60s, 5m, 1h), at least 5s and at "
        "most attainmentPeriod; default 60s. Each window is judged good or bad as a whole."
    )
    attainment_target: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.99,
        description="Fraction of good windows required over attainmentPeriod, in (0,1]; "
        "default 0.99. The error budget is 1 - attainmentTarget."
    )
    attainment_period: str = Field(
        default=DEFAULT_ATTAINMENT_PERIOD, pattern=BOUNDED_DURATION_PATTERN,
        max_length=DURATION_MAX_LENGTH,
        description="Rolling period over which attainment and the error budget are counted, "
        "as a duration (e.g. 1h, 720h); default 1h."
    )
    scaling: Scaling = Field(
        default_factory=Scaling,
        description="Replica bounds, stabilization windows and step limits; defaults: 1 to 8 "
        "replicas, +4/-1 per decision, 300s scale-down stabilization.",
    )
    batching: Batching = Field(
        default_factory=Batching,
        description="Batch-limit actuation; defaults: mode live, 8 to 256 in-flight requests "
        "per replica.",
    )
    priority: Annotated[int, Field(ge=0, le=1_000_000)] = Field(
        default=0, description="Priority when GPUs are short, 0 to 1000000; default 0. Services of "
        "higher-priority policies get scarce GPUs first."
    )
    gpu_budget: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None,
        description="Most GPUs all services bound to this policy may use together (count of "
        "GPUs); unset means no budget."
    )
    allow_quantization: bool = Field(
        default=True,
        description="false forbids FP8 weights and FP8 KV cache for this tenant; default true."
    )
    tenant: str | None = Field(
        default=None,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="Tenant name (DNS label) used in metric labels and dashboards; defaults to "
        "the namespace.",
    )

    @model_validator(mode="after")
    def _windows(self) -> SLOPolicySpec:
        window = parse_duration(self.window)
        if window < MIN_WINDOW_S:
            raise ValueError(f"spec.window must be at least {MIN_WINDOW_S}s (got {self.window})")
        if parse_duration(self.attainment_period) < window:
            raise ValueError(f"spec.attainmentPeriod ({self.attainment_period}) must be at "
                             f"least spec.window ({self.window})")
        return self


class Condition(_Status):
    """A condition in the Kubernetes style; types and reasons: docs/status-and-events.md."""

    type: str = Field(description="Condition type, e.g. Ready, Progressing, SLOCompliant.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One-word CamelCase reason for the status.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(
        default=None, description="When status last changed (RFC 3339, UTC)."
    )
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the condition was computed for."
    )


class SLOPolicyStatus(_Status):
    """Written by slo-operator only: bound services, attainment, error budget, conditions."""

    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status was computed for."
    )
    bound_services: list[str] = Field(
        default_factory=list, description="Names of the InferenceServices that reference "
        "this policy."
    )
    bound_count: int | None = Field(default=None, description="Number of bound services.")
    attainment: float | None = Field(
        default=None, description="Fraction of good windows over spec.attainmentPeriod, "
        "worst bound service, 0 to 1."
    )
    error_budget_remaining: float | None = Field(
        default=None, description="Fraction of the error budget left over "
        "spec.attainmentPeriod (1 = untouched, below 0 = overspent)."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready (Valid or InvalidSpec)."
    )


# ---------------------------------------------------------------------------- Tenant


class SelectorRequirement(_Model):
    """One requirement of a label selector (as in metav1.LabelSelectorRequirement)."""

    # The label-selector API's own rules (k8s.io/apimachinery pkg/apis/meta/v1/validation
    # ValidateLabelSelectorRequirement): In and NotIn need values, Exists and DoesNotExist
    # take none.
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!(self.operator in ['In', 'NotIn']) || "
                    "(has(self.values) && size(self.values) > 0)",
                    "spec.namespaceSelector.matchExpressions: operator In or NotIn needs values",
                    ".values",
                ),
                _cel(
                    "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || "
                    "size(self.values) == 0",
                    "spec.namespaceSelector.matchExpressions: operator Exists or DoesNotExist "
                    "takes no values",
                    ".values",
                ),
            ]
        }
    )

    key: str = Field(max_length=316, pattern=QUALIFIED_NAME_PATTERN,
                     description="Label key the requirement applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist.")
    values: list[Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]] = Field(
        default_factory=list, max_length=256,
        description="Label values (In and NotIn only).")

    @model_validator(mode="after")
    def _api_rules(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f".values: operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f".values: operator {self.operator} takes no values")
        return self


class NamespaceSelector(_Model):
    """Namespaces by label (as in metav1.LabelSelector); every term must hold. An empty
    selector selects no namespace (unlike a NetworkPolicy's): binding every namespace to a
    tenant takes an explicit ``Exists`` term."""

    match_labels: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]] = (
        Field(default_factory=dict, max_length=64,
              description="Labels (keys and values) a namespace must carry."))
    match_expressions: list[SelectorRequirement] = Field(
        default_factory=list, max_length=64, description="Requirements a namespace must meet.")

    @model_validator(mode="after")
    def _label_keys(self) -> NamespaceSelector:
        for key in self.match_labels:
            if not _QUALIFIED_NAME_RE.fullmatch(key) or len(key.split("/")[0]) > 253:
                raise ValueError(f".matchLabels: {key!r} is not a label key such as "
                                 "example.com/team")
        return self


class TenantSpec(_Model):
    """The namespaces a tenant owns, its GPU budget and its priority ceiling. Set by the
    platform team (cluster-scoped); an SLOPolicy in another namespace cannot claim it."""

    namespaces: list[Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)]] = Field(
        default_factory=list, max_length=1000,
        description="Namespaces bound to this tenant, by name.")
    namespace_selector: NamespaceSelector | None = Field(
        default=None,
        description="Namespaces bound to this tenant, by label (with spec.namespaces: either "
        "binds).")
    gpu_budget: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None,
        description="Most GPUs the tenant's services may use together, across its namespaces; "
        "an SLOPolicy's gpuBudget can lower it, never raise it. Unset: no tenant budget.")
    max_priority: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None,
        description="Highest spec.priority the tenant's SLOPolicies take effect with (a higher "
        "one is lowered to it). Unset: no ceiling.")


# ---------------------------------------------------------------------------- InferenceService


class ModelSpec(_Model):
    """The model to serve and the shape facts that size memory, KV cache and tensor parallelism."""

    name: str = Field(
        min_length=1,
        max_length=512,
        json_schema_extra={"pattern": ARG_VALUE_PATTERN},
        description="Model to serve: a Hugging Face id or a path inside the image or a volume "
        "(required; may not start with '-' or a space).",
    )
    served_name: str | None = Field(
        default=None, max_length=253, json_schema_extra={"pattern": ARG_VALUE_PATTERN},
        description="Name clients send in the 'model' field; defaults to model.name (may not "
        "start with '-' or a space)."
    )
    size_billions: Annotated[float, Field(gt=0, le=10_000)] = Field(
        description="Parameter count in billions (required); sizes weight memory and tensor "
        "parallelism."
    )
    max_model_len: Annotated[int, Field(ge=16, le=10_000_000)] | None = Field(
        default=None,
        description="Longest context (prompt + output) in tokens; unset: the model's own."
    )
    num_layers: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None,
        description="Number of transformer layers (refines KV-cache sizing); unset: estimated "
        "from the size."
    )
    num_kv_heads: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, alias="numKVHeads",
        description="Number of key/value attention heads (refines KV-cache sizing); unset: "
        "estimated."
    )
    head_dim: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None,
        description="Attention head dimension, elements per head (refines KV-cache sizing); "
        "unset: estimated."
    )
    num_attention_heads: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None,
        description="Number of attention (query) heads; tensor parallelism must divide it "
        "(e.g. 28 for Qwen2.5-7B); unset: only the KV heads are checked."
    )
    @field_validator("name", "served_name")
    @classmethod
    def _not_an_option(cls, value: str | None) -> str | None:
        if value is not None and not re.match(ARG_VALUE_PATTERN, value):
            raise ValueError("must not start with '-' or a space (it is passed to vllm serve "
                             "as an argument value)")
        return value

    quantized_checkpoint: str | None = Field(
        default=None,
        max_length=64,
        description="Quantization the checkpoint already has (e.g. fp8, awq); unset: none, "
        "the operator may quantize per engine.precision.",
    )


class EnvVar(_Model):
    """An environment variable for the vLLM container."""

    name: str = Field(
        min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name (a C identifier, dots and dashes allowed).",
    )
    value: str = Field(default="", max_length=32768, description="Value; default empty.")


class EngineSpec(_Model):
    """vLLM engine settings. Unset fields are chosen by the operator for the GPU the replicas land
    on (status.engineArgs shows the result).
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    # has(): the engine's default object carries no env list.
                    "!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name))",
                    "spec.engine.env: each name may appear once",
                    ".env",
                ),
                _cel(
                    f"!has(self.env) || self.env.all(e, "
                    f"!e.name.startsWith('{OPERATOR_ENV_PREFIX}') && "
                    f"!(e.name in {list(OPERATOR_ENV_NAMES)}))",
                    f"spec.engine.env: names {', '.join(OPERATOR_ENV_NAMES)} and "
                    f"{OPERATOR_ENV_PREFIX}* are set by the operator",
                    ".env",
                ),
            ]
        }
    )

    image: str = Field(
        default="vllm/vllm-openai:v0.32.0", min_length=1, max_length=512, pattern=r"^\S+$",
        description="vLLM container image; default vllm/vllm-openai:v0.32.0.",
    )
    precision: Precision = Field(
        default="auto",
        description="Weight precision (auto, bf16, fp16, fp8); default auto, which picks "
        "FP8 weights only where the GPU runs FP8 natively and a measured profile found it "
        "faster.",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto",
        description="KV-cache dtype; default auto, which picks fp8 where it is safe (halves "
        "KV memory, so more requests fit)."
    )
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None,
        description="Tensor-parallel size (GPUs one replica's model is split over); unset: "
        "derived from model bytes, KV needs and GPU memory."
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="Fraction of each GPU's memory vLLM may use, in (0,1] (vLLM "
        "--gpu-memory-utilization); unset: vLLM's default 0.9.",
    )
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=10_000_000)] | None = Field(
        default=None,
        description="Tokens per engine step (vLLM --max-num-batched-tokens, the chunked-prefill "
        "budget that sets inter-token latency); unset: chosen per GPU.",
    )
    extra_args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list,
        max_length=128,
        description="Extra vllm serve arguments, at most 128; they win over generated ones.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=128,
        description="Environment variables for the vLLM container, at most 128, each name once; "
        "the operator's own (SLO_*, PYTHONPATH, POD_NAME, POD_NAMESPACE, HOME, QUANT_CONFIG) "
        "are refused.",
    )

    @model_validator(mode="after")
    def _env_names(self) -> EngineSpec:
        seen: set[str] = set()
        for i, e in enumerate(self.env):
            if e.name in seen:
                raise ValueError(f".env[{i}].name: {e.name!r} is set twice")
            seen.add(e.name)
            if e.name.startswith(OPERATOR_ENV_PREFIX) or e.name in OPERATOR_ENV_NAMES:
                raise ValueError(f".env[{i}].name: {e.name!r} is set by the operator")
        return self


class Toleration(_Model):
    """A toleration added to every replica's pod (as in a Pod's spec.tolerations)."""

    # The Pod API's own rules (k8s.io/kubernetes pkg/apis/core/validation
    # ValidateTolerations), so a bad toleration is refused here rather than by the
    # Deployment apply.
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "(has(self.key) && self.key != '') || "
                    "(has(self.operator) && self.operator == 'Exists')",
                    "spec.hardware.tolerations: an empty key needs operator Exists",
                    ".key",
                ),
                _cel(
                    "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
                    "self.value == ''",
                    "spec.hardware.tolerations: operator Exists takes no value",
                    ".value",
                ),
                _cel(
                    "!has(self.tolerationSeconds) || "
                    "(has(self.effect) && self.effect == 'NoExecute')",
                    "spec.hardware.tolerations: tolerationSeconds needs effect NoExecute",
                    ".tolerationSeconds",
                ),
            ]
        }
    )

    key: str | None = Field(
        default=None, max_length=316, pattern=r"^$|" + QUALIFIED_NAME_PATTERN,
        description="Taint key (a label key); empty with Exists matches all.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal; default Equal."
    )
    value: str | None = Field(
        default=None, max_length=63, pattern=LABEL_VALUE_PATTERN,
        description="Taint value to match with Equal (a label value)."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = Field(
        default=None,
        description="Seconds a NoExecute taint is tolerated before eviction (effect NoExecute "
        "only); unset: forever.",
    )

    @model_validator(mode="after")
    def _api_rules(self) -> Toleration:
        if not self.key and self.operator != "Exists":
            raise ValueError(".key: an empty key needs operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError(".value: operator Exists takes no value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(".tolerationSeconds: needs effect NoExecute")
        return self


class HardwareSpec(_Model):
    """Which GPUs may run the replicas and how many each replica gets."""

    @model_validator(mode="after")
    def _selector_keys(self) -> HardwareSpec:
        for key in self.node_selector:
            if not _QUALIFIED_NAME_RE.fullmatch(key) or len(key.split("/")[0]) > 253:
                raise ValueError(
                    f".nodeSelector: {key!r} is not a label key such as example.com/zone"
                )
        return self

    gpu_products: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=32,
        description="Preferred GPU products in order (e.g. H100, A100-80GB); empty means any.",
    )
    gpus_per_replica: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None,
        description="GPUs per replica (count); unset: derived from the model and GPU memory."
    )
    # Keys are checked by the validator below (a CEL rule over map keys of unbounded
    # length would exceed the API server's cost budget); values by the schema.
    node_selector: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]] = (
        Field(
            default_factory=dict,
            max_length=64,
            description="Extra node labels (label keys and values, at most 64) every "
            "replica's node must carry.",
        )
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=64,
        description="Tolerations for every replica's pod (e.g. for tainted GPU nodes).",
    )


class ReplicaBounds(_Model):
    """Bounds that narrow the policy's spec.scaling.minReplicas/maxReplicas for this service."""

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

    min: Annotated[int, Field(ge=0, le=1000)] | None = Field(
        default=None, description="Fewest replicas for this service; unset: the policy's."
    )
    max: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        default=None, description="Most replicas for this service; unset: the policy's."
    )

    @model_validator(mode="after")
    def _bounds(self) -> ReplicaBounds:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(
                f"spec.replicas.min ({self.min}) must be <= spec.replicas.max ({self.max})"
            )
        return self


class PolicyRef(_Model):
    """Reference to an SLOPolicy in the same namespace."""

    name: str = Field(
        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Name of the SLOPolicy.",
    )


# The endpoint picker's ext-proc (gRPC) port when the user names none: the reference EPP's
# default (gateway-api-inference-extension v1.2.0, pkg/epp/server/runserver.go,
# DefaultGrpcPort = 9002, the default of its --grpc-port flag).
DEFAULT_ENDPOINT_PICKER_PORT = 9002


class EndpointPickerRef(_Model):
    """The endpoint picker (EPP) the InferencePool names: the v1 InferencePool's
    spec.endpointPickerRef, with the port as a plain number."""

    name: str = Field(
        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Name of the endpoint picker's object (a Service by default) in the "
        "service's namespace.",
    )
    kind: str = Field(
        default="Service", min_length=1, max_length=63,
        pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
        description="Kind of the endpoint picker's object; default Service.",
    )
    group: str = Field(
        default="", max_length=253,
        pattern=r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="API group of the endpoint picker's object; default empty (core).",
    )
    port: Annotated[int, Field(ge=1, le=65535)] = Field(
        default=DEFAULT_ENDPOINT_PICKER_PORT,
        description="The endpoint picker's ext-proc port number (1-65535); default 9002 "
        "(the reference EPP's).",
    )
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose",
        description="What the gateway does when the picker does not answer: FailClose "
        "(refuse, the default) or FailOpen (route without it).",
    )


class InferencePoolRouting(_Model):
    """An InferencePool (Gateway API Inference Extension, inference.networking.k8s.io/v1)
    over the service's pods, for a gateway and its endpoint picker to route to."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!self.enabled || has(self.endpointPickerRef)",
                    "spec.routing.inferencePool.endpointPickerRef is required when "
                    "spec.routing.inferencePool.enabled is true",
                    ".endpointPickerRef",
                ),
            ]
        }
    )

    enabled: bool = Field(
        default=False,
        description="Create an InferencePool selecting every variant's pods; default false.",
    )
    endpoint_picker_ref: EndpointPickerRef | None = Field(
        default=None,
        description="The endpoint picker the pool names (required when enabled).",
    )

    @model_validator(mode="after")
    def _picker(self) -> InferencePoolRouting:
        if self.enabled and self.endpoint_picker_ref is None:
            raise ValueError(
                ".endpointPickerRef: required when spec.routing.inferencePool.enabled is true"
            )
        return self


class RoutingSpec(_Model):
    """How traffic reaches the service beyond its Kubernetes Service."""

    inference_pool: InferencePoolRouting = Field(
        default_factory=InferencePoolRouting,
        description="An InferencePool for Gateway API Inference Extension routing; default off.",
    )


class InferenceServiceSpec(_Model):
    """A vLLM deployment whose replicas and batch limit slo-operator keeps inside the referenced
    SLOPolicy at the lowest GPU cost.
    """

    model: ModelSpec = Field(description="The model to serve (required).")
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        description="vLLM engine settings; every field is optional and chosen per GPU.",
    )
    hardware: HardwareSpec = Field(
        default_factory=HardwareSpec,
        description="GPU products, GPUs per replica, node selector and tolerations; default: "
        "any GPU node.",
    )
    slo_policy_ref: PolicyRef | None = Field(
        default=None, description="SLOPolicy in the same namespace; unset: the policy defaults."
    )
    replicas: ReplicaBounds = Field(
        default_factory=ReplicaBounds,
        description="Replica bounds that narrow the policy's spec.scaling for this service."
    )
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        description="Routing beyond the Service: an InferencePool for the Gateway API "
        "Inference Extension (opt-in).",
    )


class HardwareStatus(_Status):
    """The GPU class the replicas run on, resolved from node labels."""

    vendor: str | None = Field(default=None, description="GPU vendor: nvidia, amd or intel.")
    product: str | None = Field(default=None, description="GPU product, e.g. H100-SXM.")
    architecture: str | None = Field(default=None, description="GPU architecture, e.g. hopper.")
    compute_capability: str | None = Field(
        default=None, description="CUDA compute capability, e.g. 9.0 (NVIDIA only)."
    )
    memory_gi_b: float | None = Field(
        default=None, alias="memoryGiB", description="Memory per GPU in GiB."
    )
    gpus_per_replica: int | None = Field(default=None, description="GPUs per replica (count).")
    fp8: bool | None = Field(default=None, description="Whether the GPU runs FP8 natively.")


class ObservedStatus(_Status):
    """The latest signals from Prometheus over one policy window (absent: not observed)."""

    e2e_ms: float | None = Field(
        default=None, alias="e2eMs",
        description="End-to-end latency at the policy's e2ePercentile, milliseconds.",
    )
    ttft_ms: float | None = Field(
        default=None, description="Time to first token at the policy's ttftPercentile, "
        "milliseconds."
    )
    inter_token_ms: float | None = Field(
        default=None, description="Inter-token latency at the policy's "
        "interTokenPercentile, milliseconds."
    )
    throughput_cv: float | None = Field(
        default=None, alias="throughputCV",
        description="Jitter: coefficient of variation of the per-request decode rate (ratio).",
    )
    request_rate: float | None = Field(
        default=None, description="Finished requests per second, all replicas."
    )
    queue: float | None = Field(
        default=None, description="Requests waiting (count), engine and gateway queues."
    )
    kv_cache_usage: float | None = Field(
        default=None, description="Highest KV-cache use over replicas, a fraction 0 to 1."
    )
    running: float | None = Field(
        default=None, description="Requests running (count), all replicas."
    )
    state: str | None = Field(
        default=None, description="How usable the signals were: OK, NoTraffic, Partial, "
        "Empty, Stale or Unavailable."
    )
    time: str | None = Field(default=None, description="When observed (RFC 3339, UTC).")


class DecisionRecord(_Status):
    """One scaling or batching decision and why it was made."""

    time: str = Field(description="When decided (RFC 3339, UTC).")
    replicas: int = Field(description="Replicas decided (count).")
    batch_limit: int | None = Field(
        default=None, description="In-flight request limit per replica decided (requests)."
    )
    reason: str = Field(description="One-word CamelCase reason for the decision.")
    message: str = Field(default="", description="Human-readable explanation.")


class EngineChangeStatus(_Status):
    """One planned engine setting the in-pod launcher changed when it started vLLM."""

    setting: str = Field(description="The `vllm serve` option, e.g. --kv-cache-dtype.")
    requested: str = Field(default="", description="The planned value (empty: none).")
    applied: str = Field(
        default="", description="The value vLLM was started with (empty: the option dropped).")
    reason: str = Field(
        default="", description="The launcher's reason code, e.g. NoFP8 or FP8KVCacheRisk "
        "(docs/status-and-events.md lists them).")


class EngineObserved(_Status):
    """What the variant's pods report they run (slo_runtime_engine_info and
    slo_runtime_engine_change, read from Prometheus by the SLO loop)."""

    quantization: str | None = Field(
        default=None, description="--quantization the pods run (none: unquantized weights).")
    kv_cache_dtype: str | None = Field(default=None, description="--kv-cache-dtype they run.")
    dtype: str | None = Field(default=None, description="--dtype they run.")
    tensor_parallel_size: int | None = Field(
        default=None, description="--tensor-parallel-size they run (GPUs).")
    max_num_seqs: int | None = Field(
        default=None, description="--max-num-seqs they run (sequences).")
    max_num_batched_tokens: int | None = Field(
        default=None, description="--max-num-batched-tokens they run (tokens).")
    pods: int = Field(default=0, description="Pods of the variant reporting (count).")
    pods_on_plan: int = Field(
        default=0, description="Reporting pods that run every planned setting (count).")
    agree: bool = Field(
        default=True, description="Whether every reporting pod runs the same settings; when "
        "not, the settings above are those most pods run.")
    matches_plan: bool = Field(
        default=True, description="Whether every reporting pod runs the planned settings.")
    changes: list[EngineChangeStatus] = Field(
        default_factory=list,
        description="Settings the launcher changed from the plan in any reporting pod.")


class VariantStatus(_Status):
    """One GPU pool the service runs on: its own Deployment and engine settings."""

    name: str = Field(description="Variant id (the pool's GPU product as a DNS label).")
    product: str | None = Field(default=None, description="GPU product of the pool.")
    deployment: str | None = Field(default=None, description="The variant's Deployment.")
    desired_replicas: int = Field(default=0, description="Replicas asked of the variant (count).")
    ready_replicas: int = Field(default=0, description="Ready replicas of the variant (count).")
    pending_replicas: int = Field(
        default=0, description="Replicas Pending for lack of GPUs in the pool (count)."
    )
    gpus_per_replica: int | None = Field(default=None, description="GPUs per replica (count).")
    precision: str | None = Field(default=None, description="fp8, bf16 or fp16 weights.")
    cost_per_request_per_second: float | None = Field(
        default=None,
        description="Price per GPU-hour x GPUs per replica / requests per second one replica "
        "sustains within the SLO: the placement order, lower first (a number in the price "
        "list's unit per request/s).",
    )
    rank: int | None = Field(
        default=None, description="Position in the placement order (count from 0: first).")
    engine_observed: EngineObserved | None = Field(
        default=None, description="The engine settings the variant's pods report they run; "
        "absent while none reports.")


class ScaleToZeroStatus(_Status):
    """Scale to zero (the policy's scaling.scaleToZero): when the service went to zero and
    its last wake, as the activator recorded it (times RFC 3339)."""

    zero_since: str | None = Field(
        default=None, description="When the service went to zero replicas; absent while awake.")
    routed_to_activator: bool = Field(
        default=False, description="Whether the service's Service routes to the activator "
        "(it has no Ready replica).")
    last_wake_requested: str | None = Field(
        default=None, description="When the first request of the last wake reached the "
        "activator.")
    last_wake_requests: int | None = Field(
        default=None, description="Requests the activator held for the last wake (count).")
    last_wake_wait_seconds: float | None = Field(
        default=None, description="How long the first request of the last wake waited for a "
        "replica (seconds): the cold start a client saw.")
    last_wake_timed_out: str | None = Field(
        default=None, description="When the activator gave up on the last wake's requests "
        "(504); absent when it did not.")
    cold_starts: int = Field(
        default=0, description="Wakes from zero served since the service was created (count).")


class InferenceServiceStatus(_Status):
    """Written by slo-operator only: replicas, hardware, effective engine arguments, observed
    latency, SLO state, decisions and conditions.
    """

    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status was computed for."
    )
    replicas: int | None = Field(default=None, description="Replicas of the Deployment (count).")
    ready_replicas: int | None = Field(default=None, description="Ready replicas (count).")
    desired_replicas: int | None = Field(
        default=None, description="Replicas the operator last decided (count)."
    )
    hardware: HardwareStatus | None = Field(
        default=None, description="The GPU class the replicas run on."
    )
    variants: list[VariantStatus] = Field(
        default_factory=list,
        description="The GPU pools the service may run on, in placement order, with "
        "replicas per pool.",
    )
    placement: str | None = Field(
        default=None, description="Why the replicas sit on the pools they do."
    )
    engine_args: list[str] = Field(
        default_factory=list, description="The effective vllm serve arguments."
    )
    engine_notes: list[str] = Field(
        default_factory=list, description="Why each engine setting was chosen."
    )
    batch_limit: int | None = Field(
        default=None, description="Current in-flight request limit per replica (requests)."
    )
    observed: ObservedStatus | None = Field(
        default=None, description="Latest signals from Prometheus over one policy window."
    )
    slo_compliant: bool | None = Field(
        default=None, alias="sloCompliant",
        description="Whether the last window met every objective.",
    )
    attainment: float | None = Field(
        default=None, description="Fraction of good windows over the policy's "
        "attainmentPeriod, 0 to 1."
    )
    error_budget_remaining: float | None = Field(
        default=None, description="Fraction of the error budget left over the policy's "
        "attainmentPeriod (1 = untouched, below 0 = overspent)."
    )
    control: dict[str, Any] | None = Field(
        default=None,
        description="The SLO loop's memory that must survive an operator restart (control "
        "state and window history); written and read by slo-operator only.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    last_decisions: list[DecisionRecord] = Field(
        default_factory=list, description="The most recent decisions, newest last."
    )
    scale_to_zero: ScaleToZeroStatus | None = Field(
        default=None, description="Scale to zero and wakes; absent unless the policy allows "
        "scale to zero.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, SpecValid, PolicyBound, HardwareResolved, "
        "SLOCompliant, MetricsAvailable, ScalingLimited, Awake.",
    )


def dump(model: BaseModel) -> dict[str, Any]:
    """Wire form: camelCase keys, no nulls."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")
