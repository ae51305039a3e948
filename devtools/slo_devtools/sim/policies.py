"""Autoscaling policies the benchmark compares, each driving one simulated service.

Every policy sees the service only as Prometheus and the Kubernetes API would show it
(:class:`~slo_devtools.sim.scrape.Scraper` samples, replica counts; Dynamo's planner also
the engines' per-iteration records, which it subscribes to) and answers, once per
its own period, the replicas it wants and optionally a live batch limit. The rules of
peers are re-implemented from their public documentation (links in ``docs/benchmark.md``);
each keeps its pure arithmetic in a small function tested on tables.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from slo_devtools.sim.discrete_event import Replica, Service
from slo_devtools.sim.scrape import Percentiles, Scraper, observation
from slo_operator.api.models import SLOPolicySpec, parse_duration
from slo_operator.control.law import decide
from slo_operator.control.policy import policy_for
from slo_operator.control.state import ControlState
from slo_operator.engine.batching import BATCHED_TOKENS_LARGE_GPU
from slo_operator.reconcile.chunking import (
    ChunkMemory,
    engine_basis,
    itl_missed,
    jitter_missed,
)
from slo_operator.reconcile.chunking import choose as chunk_choose
from slo_operator.reconcile.chunking import decode_batch as chunk_decode_batch
from slo_operator.reconcile.chunking import request_shape as chunk_shape
from slo_operator.reconcile.chunking import step_times as chunk_step_times
from slo_operator.slo.evaluate import SLOHistory, evaluate_window, record
from slo_operator.slo.evaluate import report as slo_report
from slo_runtime.stepmodel import StepModel


@dataclass(frozen=True)
class Objectives:
    """One tenant's SLO: a 1-minute window is good when every objective holds."""

    e2e_ms: float
    ttft_ms: float
    itl_p99_ms: float
    jitter_max: float | None = None  # None: not an objective of this target set
    name: str = ""

    def describe(self) -> str:
        """Human-readable objectives, e.g. 'P99 e2e <= 8 s, P95 TTFT <= 1 s, ...'."""
        parts = [f"P99 e2e <= {self.e2e_ms / 1e3:g} s",
                 f"P95 TTFT <= {self.ttft_ms:g} ms",
                 f"P99 ITL <= {self.itl_p99_ms:g} ms"]
        if self.jitter_max is not None:
            parts.append(f"jitter <= {self.jitter_max:g}")
        return ", ".join(parts)


@dataclass
class Context:
    """What a policy may read about its service."""

    svc: Service
    scraper: Scraper
    objectives: Objectives
    model: StepModel  # the profile the operator would seed its model with
    min_replicas: int = 1
    max_replicas: int = 16
    hardware: str = "NVIDIA-H200"
    precision: str = "bf16"


@dataclass(frozen=True)
class Action:
    replicas: int | None = None
    limit: int | None = None
    reason: str = ""
    chunk_budget: int | None = None  # --max-num-batched-tokens (a rolling update)


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def period_s(self) -> float: ...

    def act(self, ctx: Context, now: float) -> Action: ...


def clamp(n: int, ctx: Context) -> int:
    """Replicas inside the service's bounds."""
    return max(ctx.min_replicas, min(ctx.max_replicas, n))


# --- static -------------------------------------------------------------------------------
@dataclass
class Static:
    """A fixed number of replicas (provisioning for the peak)."""

    replicas: int
    name: str = "static"
    period_s: float = 3600.0

    def act(self, ctx: Context, now: float) -> Action:
        return Action(self.replicas, reason="static")


# --- HPA behaviour (shared by the HPA/KEDA-style rules) ---------------------------------
def hpa_average_value(total: float, target: float, current: int, tolerance: float = 0.1
                      ) -> int:
    """HPA ``AverageValue`` target: ceil(total / target), unless the ratio to the current
    replicas is within ``tolerance`` of 1 (then no change)."""
    if current > 0 and abs(total / (target * current) - 1.0) <= tolerance:
        return current
    return math.ceil(total / target) if total > 0 else 0


@dataclass(frozen=True)
class HpaPolicy:
    """One ``behavior.scaleUp/scaleDown.policies`` entry: at most ``value`` pods
    (``kind`` "Pods") or ``value`` percent of the replicas at the period's start
    ("Percent") per ``period_s``."""

    kind: str
    value: int
    period_s: float


# The HPA's defaults (``autoscaling/v2`` SetDefaults_HorizontalPodAutoscalerBehavior):
# scale-up by max(100%, 4 pods) per 15 s without stabilization; scale-down by 100% per 15 s
# after a 300 s stabilization window.
HPA_DEFAULT_UP = (HpaPolicy("Percent", 100, 15.0), HpaPolicy("Pods", 4, 15.0))
HPA_DEFAULT_DOWN = (HpaPolicy("Percent", 100, 15.0),)


@dataclass
class HpaBehavior:
    """``autoscaling/v2`` behaviour as the HPA controller applies it (selectPolicy Max),
    re-implemented from kubernetes/kubernetes ``pkg/controller/podautoscaler/horizontal.go``:

    * ``stabilizeRecommendationWithBehaviors``: the recommendation is brought to within
      [lowest recommendation of the last ``up_window_s``, highest of the last
      ``down_window_s``], the current one included (windows exclusive of their start);
    * ``calculateScaleUpLimitWithScalingRules`` / ``calculateScaleDownLimitWithBehaviors``:
      each policy limits the change from the replicas at its period's start (current
      minus pods added plus pods removed within ``period_s``); up takes the most
      permissive policy, down too (the lowest floor).

    Defaults are the HPA's own (:data:`HPA_DEFAULT_UP`, :data:`HPA_DEFAULT_DOWN`)."""

    down_window_s: float = 300.0
    up_window_s: float = 0.0
    up_policies: tuple[HpaPolicy, ...] = HPA_DEFAULT_UP
    down_policies: tuple[HpaPolicy, ...] = HPA_DEFAULT_DOWN
    history: deque[tuple[float, int]] = field(default_factory=deque)  # recommendations
    events: deque[tuple[float, int]] = field(default_factory=deque)  # (t, replicas added)

    def _changed(self, period_s: float, now: float) -> tuple[int, int]:
        """(pods added, pods removed) by this HPA within the last ``period_s``."""
        ch = [d for t, d in self.events if t > now - period_s]
        return sum(d for d in ch if d > 0), -sum(d for d in ch if d < 0)

    def apply(self, rec: int, current: int, now: float) -> int:
        """Replicas the HPA sets at ``now`` for the metric's recommendation ``rec``."""
        up_rec = down_rec = rec
        for t, r in self.history:
            if t > now - self.up_window_s:
                up_rec = min(up_rec, r)
            if t > now - self.down_window_s:
                down_rec = max(down_rec, r)
        self.history.append((now, rec))
        keep = max(self.up_window_s, self.down_window_s)
        while self.history and self.history[0][0] <= now - keep:
            self.history.popleft()
        want = min(max(current, up_rec), down_rec)
        if want > current:
            limit = current
            for p in self.up_policies:
                added, removed = self._changed(p.period_s, now)
                start = current - added + removed
                limit = max(limit, start + p.value if p.kind == "Pods"
                            else math.ceil(start * (1 + p.value / 100)))
            want = min(want, limit)
        elif want < current:
            floor = current
            for p in self.down_policies:
                added, removed = self._changed(p.period_s, now)
                start = current + removed - added
                floor = min(floor, start - p.value if p.kind == "Pods"
                            else int(start * (1 - p.value / 100)))
            want = max(want, floor)
        if want != current:
            self.events.append((now, want - current))
            longest = max(p.period_s for p in (*self.up_policies, *self.down_policies))
            while self.events and self.events[0][0] <= now - longest:
                self.events.popleft()
        return want


@dataclass
class KedaThreshold:
    """KEDA Prometheus trigger (``AverageValue``) through the HPA: ``waiting`` reads
    ``sum(vllm:num_requests_waiting)``, ``outstanding`` reads running + waiting."""

    metric: str
    target: float
    period_s: float = 15.0
    behavior: HpaBehavior = field(default_factory=HpaBehavior)

    @property
    def name(self) -> str:
        return f"keda-{self.metric}>{self.target:g}"

    def act(self, ctx: Context, now: float) -> Action:
        s = ctx.scraper.latest(ctx.svc.name, now)
        if s is None:
            return Action()
        total = s.engine_waiting if self.metric == "waiting" else s.running + s.waiting
        cur = max(1, ctx.svc.desired)
        rec = clamp(hpa_average_value(total, self.target, cur), ctx)
        return Action(clamp(self.behavior.apply(rec, cur, now), ctx))


# --- Knative KPA ---------------------------------------------------------------------------
def kpa_desired(stable_avg: float, panic_avg: float, target: float, ready: int,
                panicking: bool, current: int, panic_threshold: float = 2.0
                ) -> tuple[int, bool]:
    """Knative KPA: (desired, panicking). Panic when the 6 s window asks for at least
    ``panic_threshold`` x the ready pods; while panicking never scale down."""
    want_stable = math.ceil(stable_avg / target) if stable_avg > 0 else 0
    want_panic = math.ceil(panic_avg / target) if panic_avg > 0 else 0
    enter = ready > 0 and want_panic / ready >= panic_threshold
    panicking = panicking or enter
    if panicking:
        return max(want_panic, current), panicking
    return want_stable, panicking


@dataclass
class Kpa:
    """Knative Pod Autoscaler: concurrency target per pod, 60 s stable and 6 s panic
    windows sampled every 2 s, panic threshold 200%, scale-down at most halving."""

    target: float
    period_s: float = 2.0
    stable_s: float = 60.0
    panic_s: float = 6.0
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    panicking: bool = False
    panic_since: float = -1.0

    @property
    def name(self) -> str:
        return f"kpa-concurrency{self.target:g}"

    def act(self, ctx: Context, now: float) -> Action:
        self.samples.append((now, float(ctx.svc.outstanding())))
        while self.samples and self.samples[0][0] <= now - self.stable_s:
            self.samples.popleft()
        stable = sum(c for _, c in self.samples) / len(self.samples)
        recent = [c for t, c in self.samples if t > now - self.panic_s]
        panic = sum(recent) / len(recent)
        ready = len(ctx.svc.ready())
        cur = max(1, ctx.svc.desired)
        was = self.panicking
        want, self.panicking = kpa_desired(stable, panic, self.target, ready, self.panicking,
                                           cur)
        if self.panicking and not was:
            self.panic_since = now
        # Panic ends after a stable window without the panic condition.
        if self.panicking and ready and math.ceil(panic / self.target) / ready >= 2.0:
            self.panic_since = now
        if self.panicking and now - self.panic_since >= self.stable_s:
            self.panicking = False
        want = max(want, math.ceil(cur / 2))  # max scale-down rate 2
        return Action(clamp(want, ctx))


# --- llm-d SLO-aware KEDA rule ------------------------------------------------------------
# llm-d's guide "SLO-Aware Autoscaling with KEDA and Predicted Latency"
# (https://github.com/llm-d/llm-d, guides/workload-autoscaling/README.slo-aware.md, "How it
# works", and slo-aware/README.md), with its manifests under
# guides/workload-autoscaling/slo-aware/, read at the llm-d fork zetxqx/llm-d, commit
# c397e67: prometheus-rule.yaml lines 50-76 (rule group, interval 15s: P90 TTFT / TPOT
# over [1m] rates l. 53-62, epp:saturation:raw l. 66-69, :clamped l. 72-73, :smoothed
# l. 75-76) and scaledobject.yaml (pollingInterval l. 33, HPA behavior l. 39-55,
# scalingModifiers formula l. 56-63).
LLMD_SATURATION_CAP = 2.0  # prometheus-rule.yaml: clamp_max(epp:saturation:raw, 2.0)
LLMD_SMOOTHING_S = 45.0  # prometheus-rule.yaml: avg_over_time(epp:saturation:clamped[45s])
LLMD_QUANTILE_WINDOW_S = 60.0  # histogram_quantile(0.9, ...rate(..._bucket[1m]))
LLMD_UP = 0.55  # scaledobject.yaml formula: theta_up
LLMD_DOWN = 0.40  # theta_dn


def llmd_slo_signal(ttft_p90_s: float | None, tpot_p90_s: float | None, ttft_slo_s: float,
                    tpot_slo_s: float, cap: float = LLMD_SATURATION_CAP) -> float:
    """One evaluation of the recording rules ``epp:saturation:raw`` and ``:clamped``:
    min(max(P90 TTFT / TTFT SLO, P90 TPOT / TPOT SLO), ``cap``); a latency without
    traffic reads 0 (``or vector(0)``)."""
    parts = [(v or 0.0) / slo for v, slo in ((ttft_p90_s, ttft_slo_s), (tpot_p90_s, tpot_slo_s))]
    return min(max(parts), cap)


def llmd_desired(s: float, replicas: int, ready: int, up: float = LLMD_UP,
                 down: float = LLMD_DOWN) -> int:
    """The ScaledObject's ``scalingModifiers.formula`` (scaledobject.yaml): with the
    in-flight credit c = ready / replicas while 0 < ready < replicas (else 1), on the
    scale-up branch only,

    ``replicas + ceil(replicas * (s * c / up - 1))`` when s > up,
    ``replicas - floor(replicas * (1 - s / down))`` when s < down, else ``replicas``."""
    n = replicas
    if s > up:
        c = ready / n if 0 < ready < n else 1.0
        return n + math.ceil(n * (s * c / up - 1))
    if s < down:
        return n - math.floor(n * (1 - s / down))
    return n


def llmd_behavior() -> HpaBehavior:
    """scaledobject.yaml ``horizontalPodAutoscalerConfig.behavior``: up max(100%, 4 pods)
    per 60 s after a 30 s stabilization; down 1 pod per 120 s after 180 s."""
    return HpaBehavior(down_window_s=180.0, up_window_s=30.0,
                       up_policies=(HpaPolicy("Percent", 100, 60.0), HpaPolicy("Pods", 4, 60.0)),
                       down_policies=(HpaPolicy("Pods", 1, 120.0),))


@dataclass
class LlmdSlo:
    """llm-d's SLO-aware rule as the guide ships it, every 15 s (the recording rules'
    ``interval`` and the ScaledObject's ``pollingInterval``): the P90 TTFT and TPOT over
    1 m against the SLOs, clamped at 2.0 per evaluation and averaged over 45 s; the
    formula of :func:`llmd_desired` on provisioned and ready replicas; through the HPA as
    an ``AverageValue`` target of 1 (10% tolerance) with the guide's behaviour
    (:func:`llmd_behavior`). The SLOs are the tenant's TTFT and ITL objectives (the
    guide's are 3 s / 100 ms). The guide reads the EPP's latency histograms (predicted,
    else measured); here the engine's measured histograms."""

    period_s: float = 15.0
    name: str = "llm-d-slo"
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    behavior: HpaBehavior = field(default_factory=llmd_behavior)

    def smoothed(self, clamped: float, now: float) -> float:
        """``avg_over_time(epp:saturation:clamped[45s])`` after recording ``clamped``."""
        self.samples.append((now, clamped))
        while self.samples and self.samples[0][0] <= now - LLMD_SMOOTHING_S:
            self.samples.popleft()
        return sum(v for _, v in self.samples) / len(self.samples)

    def act(self, ctx: Context, now: float) -> Action:
        scr, n = ctx.scraper, ctx.svc.name
        raw = llmd_slo_signal(scr.quantile(n, "ttft", 0.9, now, LLMD_QUANTILE_WINDOW_S),
                              scr.quantile(n, "tpot", 0.9, now, LLMD_QUANTILE_WINDOW_S),
                              ctx.objectives.ttft_ms / 1e3, ctx.objectives.itl_p99_ms / 1e3)
        s = self.smoothed(raw, now)
        # kube_deployment_status_replicas: the pods that exist (starting and ready) equal
        # the desired count here (scale-down removes a pod at once).
        cur = max(1, ctx.svc.desired)
        d = llmd_desired(s, cur, len(ctx.svc.ready()))
        rec = clamp(hpa_average_value(d, 1.0, cur), ctx)
        return Action(clamp(self.behavior.apply(rec, cur, now), ctx), reason=f"signal {s:.2f}")


# --- llm-d workload variant autoscaler, saturation analyzer ------------------------------
def wva_saturation(per_replica: list[tuple[int, int, float]], kv_threshold: float = 0.8,
                   queue_threshold: int = 5, kv_spare: float = 0.1, queue_spare: float = 3.0
                   ) -> int:
    """+1 (scale out), -1 (one can go) or 0 from per-replica (waiting, running, KV use).

    A replica is saturated at KV use >= 0.8 or queue >= 5. Out when no replica is spare or
    the non-saturated ones' mean spare KV < 0.1 or mean spare queue < 3; in when the
    non-saturated load spread over one replica fewer still leaves both spares.
    """
    if not per_replica:
        return 1
    free = [(w, kv) for w, _, kv in per_replica if kv < kv_threshold and w < queue_threshold]
    if not free:
        return 1
    n = len(free)
    spare_kv = sum(kv_threshold - kv for _, kv in free) / n
    spare_q = sum(queue_threshold - w for w, _ in free) / n
    if spare_kv < kv_spare or spare_q < queue_spare:
        return 1
    if n >= 2 and len(free) == len(per_replica):
        kv_load = sum(kv for _, kv in free)
        q_load = sum(w for w, _ in free)
        if kv_threshold - kv_load / (n - 1) >= kv_spare and \
                queue_threshold - q_load / (n - 1) >= queue_spare:
            return -1
    return 0


@dataclass
class LlmdWva:
    """llm-d's workload variant autoscaler, saturation analyzer (one variant), every 30 s."""

    period_s: float = 30.0
    name: str = "llm-d-wva"

    def act(self, ctx: Context, now: float) -> Action:
        s = ctx.scraper.latest(ctx.svc.name, now)
        if s is None:
            return Action()
        cur = max(1, ctx.svc.desired)
        if len(ctx.svc.ready()) < cur:
            return Action(cur)  # wait for replicas already on their way
        return Action(clamp(cur + wva_saturation(list(s.per_replica)), ctx))


# --- AIBrix APA -----------------------------------------------------------------------------
def apa_desired(current: int, value: float, target: float, tolerance: float = 0.1,
                up_rate: float = 2.0, down_rate: float = 2.0) -> int:
    """AIBrix APA: ceil(N x value / target) outside a +-10% band around the target, at most
    N x up_rate and at least N / down_rate."""
    if current <= 0:
        return 1
    ratio = value / target
    if 1 - tolerance <= ratio <= 1 + tolerance:
        return current
    want = math.ceil(current * ratio)
    return max(math.ceil(current / down_rate), min(math.floor(current * up_rate), want))


@dataclass
class AibrixApa:
    """AIBrix APA on mean running requests per pod, every 15 s, 300 s scale-down delay."""

    target: float
    period_s: float = 15.0
    down_delay_s: float = 300.0
    _last_up: float = -1e9

    @property
    def name(self) -> str:
        return f"aibrix-apa{self.target:g}"

    def act(self, ctx: Context, now: float) -> Action:
        s = ctx.scraper.latest(ctx.svc.name, now)
        if s is None:
            return Action()
        cur = max(1, ctx.svc.desired)
        ready = max(1, len(ctx.svc.ready()))
        # N is the ready pods the metric was averaged over (replicas still starting would
        # otherwise compound the ratio every period of a cold start).
        want = max(apa_desired(ready, (s.running + s.waiting) / ready, self.target),
                   min(cur, ready))
        if want > cur:
            self._last_up = now
        elif want < cur and now - self._last_up < self.down_delay_s:
            want = cur
        return Action(clamp(want, ctx))


# --- NVIDIA Dynamo planner, aggregated mode (load-based) --------------------------------
# ai-dynamo/dynamo, components/src/dynamo/planner: an aggregated deployment (mode "agg")
# runs load-based scaling only (core/agg.py at commit 0cf7714, AggPlanner.__init__
# rejects throughput-based scaling in agg mode); the rule is
# core/load_scaling.py (commit 0c6da1e) LoadScalingMixin._advance_load_agg,
# _agg_prefill_scaling, _agg_decode_scaling and _scale_decision, on the online regression
# core/perf_model/agg.py (commit 518a702) AggRegressionModel over
# core/perf_model/base.py (commit 439d645) _BaseRegressionModel; defaults from
# config/defaults.py (commit 1ca6015) SLAPlannerDefaults. The throughput planner's
# correction factors (observed / profiled TTFT and ITL) are not part of this mode: the
# regression, refitted on live forward passes, takes their place.
DYNAMO_LOAD_INTERVAL_S = 5.0  # load_adjustment_interval
DYNAMO_MAX_FPM_SAMPLES = 64  # max_num_fpm_samples
DYNAMO_BUCKETS_PER_AXIS = 4  # fpm_sample_bucket_size 16 = 4 x 4 buckets for the 2-D model
DYNAMO_MIN_OBSERVATIONS = 5  # load_min_observations
DYNAMO_DOWN_SENSITIVITY = 0.8  # load_scaling_down_sensitivity 80 (percent)


@dataclass(frozen=True)
class ForwardPass:
    """One engine's latest forward-pass record (Dynamo's ``ForwardPassMetrics``, published
    by the engine every iteration): the scheduled batch, the queue and the wall time. An
    idle engine's record is all zeros."""

    wall_time_s: float = 0.0
    prefill_requests: int = 0  # scheduled_requests.num_prefill_requests
    prefill_tokens: int = 0  # scheduled_requests.sum_prefill_tokens
    decode_requests: int = 0  # scheduled_requests.num_decode_requests
    decode_kv_tokens: int = 0  # scheduled_requests.sum_decode_kv_tokens
    queued_prefill_tokens: int = 0  # queued_requests.sum_prefill_tokens
    queued_decode_kv_tokens: int = 0  # queued_requests.sum_decode_kv_tokens (preempted)


def forward_pass(rep: Replica) -> ForwardPass:
    """The record a simulated replica's current step would publish: its decoding batch and
    context, the prompt chunk of this step (oldest prompts first), the prompt tokens still
    to prefill behind that chunk and in its queue (vLLM counts a prompt as queued until
    the step that gives it tokens), and the step's time. Preempted sequences re-enter the
    queue as prompts here (recompute), so the queued decode KV stays 0."""
    if not rep.busy:
        return ForwardPass()
    p, b = rep.seg_p, rep.n_dec
    kv = rep.base_ctx + b * rep.dstep
    chunk_reqs, left = 0, p
    for r in rep.prefilling:
        if left <= 0:
            break
        chunk_reqs += 1
        left -= r.prefill_left
    pending = sum(r.prefill_left for r in rep.prefilling) - p + \
        sum(r.prefill_left for r in rep.waiting)
    return ForwardPass(rep.seg_dt0, chunk_reqs, p, b, kv if b else 0, max(0, pending))


class _MovingAverage:
    """base.py ``_MovingAverage``: mean of the last ``size`` values, leading zeros (the
    idle time before traffic) skipped."""

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.seen = False

    def add(self, v: float) -> None:
        if v == 0.0 and not self.seen:
            return
        self.seen = self.seen or v != 0.0
        self.values.append(v)

    @property
    def value(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0


class FpmRegression:
    """``AggRegressionModel``: wall time = a + b x prefill tokens + c x decode KV tokens,
    ordinary least squares (sklearn's LinearRegression there, numpy's lstsq on centred
    data here: the same solution, minimum-norm on a constant axis) over at most
    ``max_samples`` observations kept spread over a 4 x 4 grid of the inputs' range (the
    fullest bucket loses its oldest); a fit with a negative coefficient is rejected."""

    def __init__(self, max_samples: int = DYNAMO_MAX_FPM_SAMPLES,
                 min_observations: int = DYNAMO_MIN_OBSERVATIONS,
                 per_axis: int = DYNAMO_BUCKETS_PER_AXIS) -> None:
        self.max_samples = max_samples
        self.min_observations = min_observations
        self.per_axis = per_axis
        self.buckets: dict[tuple[int, int], deque[tuple[float, float, float]]] = {}
        self.lo = [math.inf, math.inf]
        self.hi = [-math.inf, -math.inf]
        self.count = 0
        self.coef: tuple[float, float, float] | None = None  # (a, b, c) when fitted
        self.fitted = False
        self.avg_isl = _MovingAverage(max_samples)
        self.avg_decode_len = _MovingAverage(max_samples)
        self.avg_prefill_tokens = _MovingAverage(max_samples)

    def _key(self, x: tuple[float, float]) -> tuple[int, int]:
        k = []
        for i, v in enumerate(x):
            lo, hi = self.lo[i], self.hi[i]
            idx = 0 if hi <= lo else int((v - lo) / (hi - lo) * self.per_axis)
            k.append(max(0, min(idx, self.per_axis - 1)))
        return k[0], k[1]

    def add(self, f: ForwardPass) -> None:
        """``add_observation``: moving averages always, the sample when it ran a step."""
        if f.prefill_requests > 0:
            self.avg_isl.add(f.prefill_tokens / f.prefill_requests)
        if f.decode_requests > 0:
            self.avg_decode_len.add(f.decode_kv_tokens / f.decode_requests)
        self.avg_prefill_tokens.add(float(f.prefill_tokens))
        if f.wall_time_s == 0.0:
            return
        x = (float(f.prefill_tokens), float(f.decode_kv_tokens))
        changed = False
        for i, v in enumerate(x):
            if v < self.lo[i]:
                self.lo[i], changed = v, True
            if v > self.hi[i]:
                self.hi[i], changed = v, True
        if changed and self.count:
            old = [o for q in self.buckets.values() for o in q]
            self.buckets = {}
            for o in old:
                self.buckets.setdefault(self._key((o[0], o[1])), deque()).append(o)
        self.buckets.setdefault(self._key(x), deque()).append((*x, f.wall_time_s))
        self.count += 1
        if self.count > self.max_samples:
            fattest = max(self.buckets, key=lambda k: len(self.buckets[k]))
            self.buckets[fattest].popleft()
            self.count -= 1
            if not self.buckets[fattest]:
                del self.buckets[fattest]
        self.fitted = False

    def has_sufficient_data(self) -> bool:
        return self.count >= self.min_observations

    def _fit(self) -> bool:
        if self.fitted:
            return self.coef is not None
        self.fitted, self.coef = True, None
        obs = [o for q in self.buckets.values() for o in q]
        if len(obs) < self.min_observations:
            self.fitted = False
            return False
        arr = np.array(obs)
        xm, ym = arr[:, :2].mean(axis=0), arr[:, 2].mean()
        sol = np.linalg.lstsq(arr[:, :2] - xm, arr[:, 2] - ym, rcond=None)[0]
        if (sol < 0).any():
            return False
        self.coef = (float(ym - xm @ sol), float(sol[0]), float(sol[1]))
        return True

    def predict(self, prefill_tokens: float, decode_kv_tokens: float) -> float | None:
        """``_predict_2d``: seconds of one iteration (at least 1 us); None when unfitted."""
        if not self._fit() or self.coef is None:
            return None
        a, b, c = self.coef
        return max(1e-6, a + b * prefill_tokens + c * decode_kv_tokens)

    def ttft(self, queued_prefill: float, budget: int, decode_kv: float) -> float | None:
        """``estimate_next_ttft``: a new prompt of the mean length behind the queue,
        prefilled in chunks of ``budget`` tokens beside the current decode KV."""
        if not self._fit() or budget <= 0:
            return None
        total = queued_prefill + self.avg_isl.value
        out = 0.0
        while total > 0:
            chunk = min(total, budget)
            out += self.predict(chunk, decode_kv) or 0.0
            total -= chunk
        return out

    def itl(self, decode_kv: float, queued_kv: float = 0.0) -> float | None:
        """``estimate_next_itl``: one iteration with the mean prefill load beside the decode
        KV, the queued KV and one more sequence of the mean length."""
        if not self._fit():
            return None
        return self.predict(self.avg_prefill_tokens.value,
                            decode_kv + queued_kv + self.avg_decode_len.value)


def _dynamo_scale(estimates_ms: list[float], sla_ms: float, n: int, can_down: bool,
                  min_endpoint: int) -> int | None:
    """``_scale_decision``: +1 when every engine's estimate is above the SLA; -1 when the
    caller's consolidation check allows it; else None (no change)."""
    if not estimates_ms:
        return None
    if all(t > sla_ms for t in estimates_ms):
        return n + 1
    if n > 1 and can_down:
        return max(n - 1, min_endpoint)
    return None


def dynamo_agg_desired(reg: FpmRegression, engines: list[ForwardPass], n: int,
                       ttft_ms: float, itl_ms: float, budget: int, max_kv_tokens: int,
                       min_endpoint: int = 1,
                       sensitivity: float = DYNAMO_DOWN_SENSITIVITY) -> int:
    """One load-based adjustment of an aggregated deployment of ``n`` engines.

    TTFT side (``_agg_prefill_scaling``): each engine's next TTFT from its queued prompt
    tokens and decode KV; scale-down only when, with the queues and decode KV of ``n``
    engines on ``n - 1`` (x n/(n-1)), every engine's queue-induced TTFT (over its own
    prompt's) stays under ``sensitivity`` x (SLA - own). ITL side (``_agg_decode_scaling``):
    each engine's next ITL; scale-down only when the consolidated KV (decode + queued
    prompts, x n/(n-1)) fits the cache and its ITL stays under ``sensitivity`` x SLA. A
    side that refuses a scale-down holds ``n``. Combined (``_advance_load_agg``): up when
    either side asks for it, down when both (or the ITL side alone when the TTFT side has
    no signal), by one replica, never below ``min_endpoint``."""
    cons = n / (n - 1) if n > 1 else 1.0
    # TTFT side.
    est: list[float] = []
    can_down, refused = n > 1, False
    for f in engines:
        t = reg.ttft(f.queued_prefill_tokens, budget, f.decode_kv_tokens)
        if t is not None:
            est.append(t * 1e3)
        if can_down:
            post_kv = int(f.decode_kv_tokens * cons)
            own = reg.ttft(0, budget, post_kv)
            post = reg.ttft(int(f.queued_prefill_tokens * cons), budget, post_kv)
            if own is None or post is None:
                can_down = False
            else:
                room = (ttft_ms - own * 1e3) * sensitivity
                if room <= 0 or (post - own) * 1e3 >= room:
                    can_down, refused = False, True
    p = _dynamo_scale(est, ttft_ms, n, can_down, min_endpoint)
    if p is None and refused:
        p = n
    # ITL side.
    est = []
    can_down, refused = n > 1, False
    for f in engines:
        t = reg.itl(f.decode_kv_tokens, f.queued_decode_kv_tokens)
        if t is not None:
            est.append(t * 1e3)
        if can_down:
            post = int((f.decode_kv_tokens + f.queued_decode_kv_tokens +
                        f.queued_prefill_tokens) * cons)
            if max_kv_tokens > 0 and post >= max_kv_tokens:
                can_down, refused = False, True
                continue
            post_itl = reg.itl(post)
            if post_itl is None:
                can_down = False
            elif post_itl * 1e3 >= itl_ms * sensitivity:
                can_down, refused = False, True
    d = _dynamo_scale(est, itl_ms, n, can_down, min_endpoint)
    if d is None and refused:
        d = n
    if p is not None and p > n:
        want = p
    elif d is not None and (d > n or (p is None and d < n)):
        want = d
    elif p is not None and p < n and d is not None and d < n:
        want = max(p, d)
    else:
        want = n
    return max(want, min_endpoint)


@dataclass
class DynamoPlanner:
    """Dynamo's planner for an aggregated deployment, SLA target, load-based: every 5 s it
    feeds each ready engine's forward pass to the regression and, unless a scaling it
    asked for is still in progress (desired != ready replicas), adds or removes at most
    one replica by :func:`dynamo_agg_desired`. The SLAs are the tenant's TTFT and ITL
    objectives. Forward passes come from the simulated replicas (:func:`forward_pass`):
    the planner subscribes to the engines' per-iteration records, which no Prometheus
    scrape holds."""

    period_s: float = DYNAMO_LOAD_INTERVAL_S
    name: str = "dynamo-planner"
    regression: FpmRegression = field(default_factory=FpmRegression)

    def act(self, ctx: Context, now: float) -> Action:
        ready = ctx.svc.ready()
        engines = [forward_pass(r) for r in ready]
        for f in engines:
            self.regression.add(f)
        n = len(ready)
        if not engines or n != ctx.svc.desired or not self.regression.has_sufficient_data():
            return Action()
        want = dynamo_agg_desired(
            self.regression, engines, n, ctx.objectives.ttft_ms, ctx.objectives.itl_p99_ms,
            ctx.svc.budget, ready[0].model.kv_capacity_tokens, ctx.min_replicas)
        return Action(clamp(want, ctx), reason=f"load-based {n} -> {want}")


# --- the oracle's schedule --------------------------------------------------------------
@dataclass
class Schedule:
    """Replicas per window known in advance; each window's replicas are started one cold
    start (plus one period) ahead, so they are ready when the window begins."""

    per_window: list[int]
    window_s: float
    lead_s: float
    period_s: float = 5.0
    name: str = "oracle"
    foresight: bool = True  # acts from t=0, without waiting for metrics

    def want(self, t: float) -> int:
        w0 = int(t // self.window_s)
        w1 = int((t + self.lead_s + self.period_s) // self.window_s)
        seg = self.per_window[min(w0, len(self.per_window) - 1):w1 + 1]
        return max(seg) if seg else self.per_window[-1]

    def act(self, ctx: Context, now: float) -> Action:
        return Action(max(1, self.want(now)))


# --- slo-operator: the operator's own decide ------------------------------------------------
# The operator's pass period (``slo_operator.settings.OperatorSettings.interval``; a test
# keeps the two equal).
OPERATOR_PERIOD_S = 20.0


def policy_spec(obj: Objectives, max_replicas: int, max_batch: int = 256,
                min_replicas: int = 1, *, scale_to_zero: bool = False,
                idle_before_zero: str | None = None) -> SLOPolicySpec:
    """The SLOPolicy a user would write for these objectives (``scaleToZero`` and
    ``idleBeforeZero`` as given; ``None``: the policy's default)."""
    scaling: dict[str, object] = {"minReplicas": min_replicas, "maxReplicas": max_replicas}
    if scale_to_zero:
        scaling["scaleToZero"] = True
    if idle_before_zero is not None:
        scaling["idleBeforeZero"] = idle_before_zero
    return SLOPolicySpec.model_validate({
        "objectives": {"e2eLatencyMs": int(obj.e2e_ms), "ttftMs": int(obj.ttft_ms),
                       "interTokenLatencyMs": int(obj.itl_p99_ms),
                       **({"throughputCVMax": obj.jitter_max} if obj.jitter_max else {})},
        "scaling": scaling,
        "batching": {"mode": "live", "maxBatch": max_batch},
    })


@dataclass
class SloOperator:
    """``control.decide`` on an Observation built from the scraped samples, every 20 s."""

    spec: SLOPolicySpec
    model_size_b: float = 8.0
    name: str = "slo-operator"
    period_s: float = OPERATOR_PERIOD_S
    state: ControlState = field(default_factory=ControlState)
    reasons: list[tuple[float, str, str]] = field(default_factory=list)
    history: SLOHistory | None = None  # the windows judged so far, as the operator keeps them
    chunk: ChunkMemory | None = None  # the chunked-prefill budget kept, as status keeps it
    # The jitter lever (reconcile.chunking) on; off: the budget answers the inter-token
    # objective alone, as before the lever (bench/jitter_lever.py runs both).
    jitter_lever: bool = True

    def _chunk(self, ctx: Context, now: float | None) -> ChunkMemory | None:
        """The operator's ITL lever (``reconcile.chunking``) for this service's replicas."""
        o = self.spec.objectives
        itl, cv = o.inter_token_latency_ms, o.throughput_cv_max
        if itl is None and cv is None:
            return None
        st, source = chunk_step_times(self.model_size_b, ctx.precision, ctx.hardware, 1,
                                      self.state)
        seqs = ctx.svc.max_num_seqs
        batch = chunk_decode_batch(st, o, self.state, self.spec.batching.min_batch, seqs)
        return chunk_choose(st=st, source=source, itl_ms=None if itl is None else float(itl),
                            batch=batch, default=BATCHED_TOKENS_LARGE_GPU, floor=seqs,
                            engine=engine_basis(ctx.precision, 1, seqs), held=self.chunk,
                            now=now, shape=chunk_shape(self.state),
                            missed=itl_missed(self.state),
                            cv_max=None if cv is None else float(cv),
                            jitter_over=jitter_missed(self.state) if self.jitter_lever
                            else None)

    def initial_chunk_budget(self, ctx: Context) -> int | None:
        """The budget the operator renders the Deployment with (seed step times)."""
        self.chunk = self._chunk(ctx, None)
        return None if self.chunk is None else self.chunk.running

    def act(self, ctx: Context, now: float) -> Action:
        o = self.spec.objectives
        window = float(parse_duration(self.spec.window))
        period = float(parse_duration(self.spec.attainment_period))
        pct = Percentiles(o.e2e_percentile, o.ttft_percentile, o.inter_token_percentile)
        obs = observation(ctx.scraper, ctx.svc, now, window, pct,
                          hardware=ctx.hardware, precision=ctx.precision,
                          model_size_b=self.model_size_b)
        if ctx.svc.wake is not None:
            obs = replace(obs, wake=ctx.svc.wake)  # the activator's annotation
        if self.history is not None:
            rep = slo_report(self.history, self.spec.attainment_target, period, now)
            obs = replace(obs, error_budget_left=rep.error_budget_remaining)
        dec = decide(obs, policy_for(self.spec), self.state, now)
        self.state = dec.state
        # The operator judges each pass's window and keeps the history in status.
        self.history = record(self.history or SLOHistory(int(window)),
                              evaluate_window(obs.signals, o).outcome, now, window, period)
        if not dec.valid:
            return Action(reason=dec.reason)
        if dec.replicas != ctx.svc.desired or dec.limit_reason:
            self.reasons.append((now, dec.reason, dec.message))
        budget = None
        kept = self._chunk(ctx, now)
        was = self.chunk.running if self.chunk is not None else ctx.svc.budget
        if kept is not None and kept.running != was:
            budget = kept.running
            self.reasons.append((now, "ChunkBudgetChanged", f"{was} -> {budget} tokens"))
        self.chunk = kept
        return Action(dec.replicas, dec.batch_limit, dec.reason, chunk_budget=budget)
