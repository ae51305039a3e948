"""Autoscaling policies the benchmark compares, each driving one simulated service.

Every policy sees the service only as Prometheus and the Kubernetes API would show it
(:class:`~slo_devtools.sim.scrape.Scraper` samples, replica counts) and answers, once per
its own period, the replicas it wants and optionally a live batch limit. The rules of
peers are re-implemented from their public documentation (links in ``docs/benchmark.md``);
each keeps its pure arithmetic in a small function tested on tables.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from slo_devtools.sim.discrete_event import Service
from slo_devtools.sim.scrape import Percentiles, Scraper, observation
from slo_operator.api.models import SLOPolicySpec, parse_duration
from slo_operator.control.law import decide
from slo_operator.control.policy import policy_for
from slo_operator.control.state import ControlState
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


@dataclass
class HpaBehavior:
    """The default ``autoscaling/v2`` behaviour: scale-up at most max(+100%, +4 pods) per
    15 s with no stabilization; scale-down to the highest recommendation of the last
    ``down_window_s`` (300 s)."""

    down_window_s: float = 300.0
    history: deque[tuple[float, int]] = field(default_factory=deque)

    def apply(self, rec: int, current: int, now: float) -> int:
        self.history.append((now, rec))
        while self.history and self.history[0][0] < now - self.down_window_s:
            self.history.popleft()
        if rec > current:
            return min(rec, max(2 * current, current + 4))
        return min(current, max(r for _, r in self.history))


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
def llmd_slo_signal(ttft_p90_s: float | None, tpot_p90_s: float | None, ttft_slo_s: float,
                    tpot_slo_s: float) -> float:
    """max(P90 TTFT / TTFT SLO, P90 TPOT / TPOT SLO); 0 for an idle service."""
    parts = [v / slo for v, slo in ((ttft_p90_s, ttft_slo_s), (tpot_p90_s, tpot_slo_s))
             if v is not None]
    return max(parts) if parts else 0.0


@dataclass
class LlmdSlo:
    """llm-d's SLO-aware rule: signal averaged over 45 s; one replica out per HPA sync
    above 0.55, one in below 0.40 after the HPA scale-down stabilization (300 s), at most
    one pod per 120 s. The SLOs are the tenant's own (llm-d's defaults are 3 s / 100 ms)."""

    out_above: float = 0.55
    in_below: float = 0.40
    window_s: float = 45.0
    period_s: float = 15.0
    down_window_s: float = 300.0
    down_every_s: float = 120.0
    name: str = "llm-d-slo"
    _below_since: float = -1.0
    _last_down: float = -1e9

    def act(self, ctx: Context, now: float) -> Action:
        scr, n = ctx.scraper, ctx.svc.name
        s = llmd_slo_signal(scr.quantile(n, "ttft", 0.9, now, self.window_s),
                            scr.quantile(n, "tpot", 0.9, now, self.window_s),
                            ctx.objectives.ttft_ms / 1e3, ctx.objectives.itl_p99_ms / 1e3)
        cur = max(1, ctx.svc.desired)
        if s > self.out_above:
            self._below_since = -1.0
            return Action(clamp(cur + 1, ctx), reason=f"signal {s:.2f}")
        if s < self.in_below:
            if self._below_since < 0:
                self._below_since = now
            if now - self._below_since >= self.down_window_s and \
                    now - self._last_down >= self.down_every_s and cur > ctx.min_replicas:
                self._last_down = now
                return Action(clamp(cur - 1, ctx), reason=f"signal {s:.2f}")
        else:
            self._below_since = -1.0
        return Action(cur)


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


# --- NVIDIA Dynamo planner (throughput-based, aggregated) --------------------------------
def dynamo_replicas(rate: float, isl: float, osl: float, model: StepModel, ttft_ms: float,
                    itl_ms: float, budget: int, max_batch: int = 256) -> int:
    """Replicas for ``rate`` req/s from profiled per-replica throughput at the targets:
    prefill at the chunk size whose step fits the TTFT target, decode at the largest batch
    whose step fits the ITL target; an aggregated replica does both, so GPU time adds."""
    if rate <= 0:
        return 0
    chunk = budget
    while chunk > 64 and model.prefill_ms(chunk) > ttft_ms:
        chunk //= 2
    prefill_tps = chunk / (model.prefill_ms(chunk) / 1e3)
    b = 1
    ctx = int(isl + osl / 2)
    while b < max_batch and model.decode_ms(b + 1, (b + 1) * ctx) <= itl_ms:
        b += 1
    decode_tps = b / (model.decode_ms(b, b * ctx) / 1e3)
    return math.ceil(rate * isl / prefill_tps + rate * osl / decode_tps)


DYNAMO_MAX_CORRECTION = 4.0


@dataclass
class DynamoPlanner:
    """Dynamo's throughput-based planner: every 180 s, the next interval's load predicted
    by the last interval's (constant predictor), replicas from profiled throughput, the
    load scaled by the prefill correction factor (mean TTFT observed / profiled, 1..4)."""

    period_s: float = 180.0
    name: str = "dynamo-planner"

    def act(self, ctx: Context, now: float) -> Action:
        scr, n = ctx.scraper, ctx.svc.name
        rate = scr.rate(n, "requests", now, self.period_s)
        if rate is None:
            return Action()
        isl = (scr.rate(n, "prompt_tokens", now, self.period_s) or 0.0) / rate if rate else 0
        osl = (scr.rate(n, "gen_tokens", now, self.period_s) or 0.0) / rate if rate else 0
        # Correction factor (observed over profiled latency, as the planner computes it):
        # queueing the throughput profile cannot see inflates the load it plans for.
        ttft = scr.mean(n, "ttft", now, self.period_s)
        expected = ctx.model.prefill_ms(int(isl)) / 1e3 if isl else None
        corr = 1.0
        if ttft is not None and expected:
            corr = min(DYNAMO_MAX_CORRECTION, max(1.0, ttft / expected))
        want = dynamo_replicas(rate * corr, isl, osl, ctx.model, ctx.objectives.ttft_ms,
                               ctx.objectives.itl_p99_ms, ctx.svc.budget)
        return Action(clamp(want, ctx))


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
                min_replicas: int = 1) -> SLOPolicySpec:
    """The SLOPolicy a user would write for these objectives."""
    return SLOPolicySpec.model_validate({
        "objectives": {"e2eLatencyMs": int(obj.e2e_ms), "ttftMs": int(obj.ttft_ms),
                       "interTokenLatencyMs": int(obj.itl_p99_ms),
                       **({"throughputCVMax": obj.jitter_max} if obj.jitter_max else {})},
        "scaling": {"minReplicas": min_replicas, "maxReplicas": max_replicas},
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

    def act(self, ctx: Context, now: float) -> Action:
        o = self.spec.objectives
        pct = Percentiles(o.e2e_percentile, o.ttft_percentile, o.inter_token_percentile)
        obs = observation(ctx.scraper, ctx.svc, now, float(parse_duration(self.spec.window)), pct,
                          hardware=ctx.hardware, precision=ctx.precision,
                          model_size_b=self.model_size_b)
        dec = decide(obs, policy_for(self.spec), self.state, now)
        self.state = dec.state
        if not dec.valid:
            return Action(reason=dec.reason)
        if dec.replicas != ctx.svc.desired or dec.limit_reason:
            self.reasons.append((now, dec.reason, dec.message))
        return Action(dec.replicas, dec.batch_limit, dec.reason)
