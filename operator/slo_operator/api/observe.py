"""What the SLO loop observes about one InferenceService, as plain immutable values.

These types sit low (in ``api``) so that every layer can share them without cycles: the
Prometheus and Kubernetes adapters produce them, ``slo`` evaluates them, ``control``
decides from them, and the benchmark's simulator produces the very same types from
simulated replicas, so ``decide`` is one piece of code everywhere.

Times are seconds since the epoch (``float``), passed in; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from slo_operator.api.activation import Wake


class MetricsState(StrEnum):
    """How trustworthy one service's signals are in this cycle (typed, never an exception)."""

    OK = "OK"  # every required signal present and finite
    NO_TRAFFIC = "NoTraffic"  # series exist but no request finished in the window
    PARTIAL = "Partial"  # some signals present, some missing or NaN
    EMPTY = "Empty"  # no series at all for this service (not scraped yet, or renamed)
    STALE = "Stale"  # newest sample older than the staleness bound
    UNAVAILABLE = "Unavailable"  # Prometheus could not be queried (down, timeout, bad reply)


@dataclass(frozen=True)
class ServiceKey:
    """Identify one InferenceService by namespace and name (``namespace/name``)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Signals:
    """One service's signals over the policy window (all its pods together).

    ``None`` means "not observed" (missing, NaN or stale), never zero. Latencies are in
    milliseconds at the policy's percentiles; rates per second.
    """

    state: MetricsState = MetricsState.EMPTY
    message: str = ""
    e2e_ms: float | None = None  # vllm:e2e_request_latency_seconds at e2ePercentile
    ttft_ms: float | None = None  # vllm:time_to_first_token_seconds at ttftPercentile
    itl_ms: float | None = None  # vllm:inter_token_latency_seconds at interTokenPercentile
    jitter: float | None = None  # service instability (see slo/ for the definition)
    request_rate: float | None = None  # finished requests per second
    prompt_tokens_rate: float | None = None  # prompt tokens per second
    generation_tokens_rate: float | None = None  # generated tokens per second
    waiting: float | None = None  # requests waiting (sum over pods; engine + gateway queue)
    running: float | None = None  # requests running (sum over pods)
    kv_usage: float | None = None  # highest KV-cache use over pods, 0..1
    preemptions_rate: float | None = None  # preemptions per second
    sample_time: float | None = None  # newest sample's timestamp
    pods: int | None = None  # pods reporting engine metrics
    latency_source: str = ""  # "gateway" (client-visible) or "engine" (vLLM's own view)
    # Demand as it arrives (the gateway counts requests before admission): the mean
    # arrival rate over the window, over its last half (``slo.promql.recent_range_s``) and
    # the highest short-window rate inside it.
    arrival_rate: float | None = None  # requests arriving per second (window mean)
    arrival_recent_rate: float | None = None  # ... over the window's last half
    arrival_peak_rate: float | None = None  # highest short-window arrival rate in the window
    prefix_hit_share: float | None = None  # share of prompt tokens found in the prefix cache
    decode_mean_ms: float | None = None  # mean time per output token over the window
    prefill_mean_ms: float | None = None  # mean prefill time (scheduled to first token)
    # Answers' length in tokens at the end-to-end percentile, at least: the lower bound of
    # the generation-token histogram's bucket holding that rank (slo.histogram).
    answer_tail_tokens: float | None = None


@dataclass(frozen=True)
class ReplicaCounts:
    """Replicas as the Kubernetes watch caches see them."""

    desired: int = 0  # what the operator last set on the Deployment
    ready: int = 0  # Ready pods, warm-up included
    warming: int = 0  # Ready for less than the warm-up period (excluded from the model)
    starting: int = 0  # scheduled, not Ready yet
    pending: int = 0  # unschedulable (never counted as capacity)

    @property
    def serving(self) -> int:
        """Replicas whose samples may refine the capacity model."""
        return max(0, self.ready - self.warming)


@dataclass(frozen=True)
class Observation:
    """Everything ``decide`` sees about one service in one cycle."""

    key: ServiceKey
    now: float
    signals: Signals
    replicas: ReplicaCounts
    batch_limit: int  # live in-flight limit per replica now in force
    max_batch: int  # ceiling pinned in --max-num-seqs (the limit never exceeds it)
    hardware: str = ""  # hardware class key, e.g. "H100-SXM5-80GB" (capacity model lookup)
    precision: str = "bf16"  # weights precision in use: bf16, fp16 or fp8
    gpus_per_replica: int = 1
    max_num_batched_tokens: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    model_size_b: float | None = None  # parameters in billions (scales the capacity seed)
    # Share of the SLO period's error budget left (slo.evaluate.report, from the windows
    # written before this cycle); None before any window was judged.
    error_budget_left: float | None = None
    # The activator's last wake of this service (``api.activation``), None when none.
    wake: Wake | None = None
    # Requests reach the replicas through a load-aware picker (an InferencePool's endpoint
    # picker), which pools them; False: a plain Service, whose proxy spreads connections at
    # random, so each replica queues its own share.
    pooled_routing: bool = False
