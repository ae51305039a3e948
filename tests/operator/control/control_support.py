"""Builders for control-law tests: observations, policies and states in one line each, and
``Loop``, which feeds ``decide`` one observation per cycle and carries its state forward."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from slo_operator.api.activation import Wake
from slo_operator.api.models import SLOPolicySpec
from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)
from slo_operator.control import ControlPolicy, ControlState, Decision, decide, policy_for
from slo_operator.control.capacity import (
    DEFAULT_STEP_TIMES,
    StepTimes,
    decode_context,
    rate_at_batch,
)
from slo_operator.control.placement import VariantOption

T0 = 1_800_000_000.0
KEY = ServiceKey("team-a", "chat")
PROMPT, OUTPUT = 500.0, 200.0
# Requests per second one replica is planned for with these shapes at batch 64 (~24).
PER_REPLICA = rate_at_batch(DEFAULT_STEP_TIMES, 64, PROMPT, OUTPUT)
CYCLE = 20.0  # seconds between two decisions in scenarios (the operator's default period)


def make_policy(**overrides: Any) -> ControlPolicy:
    """Feasible targets for 500+200-token requests on the default seed, batch 8..64."""
    spec = SLOPolicySpec.model_validate({
        "objectives": {"e2eLatencyMs": 10_000, "ttftMs": 1_000},
        "batching": {"minBatch": 8, "maxBatch": 64},
    })
    return replace(policy_for(spec), **overrides)


def make_signals(*, rate: float | None = 10.0, e2e: float | None = 4_000.0,
                 ttft: float | None = 300.0, itl: float | None = None,
                 waiting: float | None = 0.0, running: float | None = 10.0,
                 state: MetricsState = MetricsState.OK, gen_rate: float | None = None,
                 prompt: float = PROMPT, output: float = OUTPUT,
                 arrivals: float | None = None, peak: float | None = None,
                 recent: float | None = None, hit: float | None = None,
                 decode_ms: float | None = None, prefill_ms: float | None = None,
                 kv: float | None = None, preemptions: float | None = None,
                 pods: int | None = None, answer_tail: float | None = None,
                 jitter: float | None = None) -> Signals:
    """One window's signals: ``rate`` finished requests per second of ``prompt`` +
    ``output`` tokens; ``arrivals``, ``recent`` (the window's last half) and ``peak`` are
    the gateway's counts (None: no gateway), ``hit`` the prefix-cache share, ``decode_ms``
    the mean time per output token, ``prefill_ms`` vLLM's mean prefill time,
    ``answer_tail`` the answers' tail read from vLLM's generation-token buckets."""
    r = rate or 0.0
    return Signals(
        state=state, e2e_ms=e2e, ttft_ms=ttft, itl_ms=itl, request_rate=rate,
        prompt_tokens_rate=r * prompt, generation_tokens_rate=gen_rate if gen_rate is not None
        else r * output, waiting=waiting, running=running, sample_time=T0,
        arrival_rate=arrivals, arrival_recent_rate=recent, arrival_peak_rate=peak,
        prefix_hit_share=hit,
        decode_mean_ms=decode_ms, prefill_mean_ms=prefill_ms, kv_usage=kv,
        preemptions_rate=preemptions, pods=pods,
        answer_tail_tokens=answer_tail, jitter=jitter,
    )


def make_obs(*, desired: int = 2, ready: int | None = None, warming: int = 0,
             starting: int = 0, pending: int = 0, batch_limit: int = 64, max_batch: int = 64,
             gpus_per_replica: int = 1, now: float = T0, budget: float | None = None,
             hardware: str = "H200", wake: Wake | None = None, pooled: bool = False,
             **signals: Any) -> Observation:
    """An observation of ``desired`` replicas (all ready unless told), ``budget`` the share
    of the error budget left, ``pooled`` whether routing pools the requests."""
    return Observation(
        key=KEY, now=now, signals=make_signals(**signals),
        replicas=ReplicaCounts(desired=desired, ready=desired if ready is None else ready,
                               warming=warming, starting=starting, pending=pending),
        batch_limit=batch_limit, max_batch=max_batch, hardware=hardware, precision="bf16",
        gpus_per_replica=gpus_per_replica, error_budget_left=budget, wake=wake,
        pooled_routing=pooled,
    )


@dataclass
class Loop:
    """``decide`` over time, as a Deployment that follows it at once: each ``step`` observes
    the replicas and limit the last decision set, ``CYCLE`` seconds after it, and carries
    ``decision.state`` forward. Keyword arguments are ``make_obs``'s, per cycle."""

    policy: ControlPolicy = field(default_factory=make_policy)
    replicas: int = 2
    limit: int = 64
    state: ControlState = field(default_factory=ControlState)
    now: float = T0
    cycle: float = CYCLE
    decisions: list[Decision] = field(default_factory=list)

    def step(self, **obs: Any) -> Decision:
        obs.setdefault("desired", self.replicas)
        obs.setdefault("batch_limit", self.limit)
        d = decide(make_obs(now=self.now, **obs), self.policy, self.state, self.now)
        self.state, self.replicas, self.limit = d.state, d.replicas, d.batch_limit
        self.decisions.append(d)
        self.now += self.cycle
        return d

    def run(self, seconds: float, **obs: Any) -> list[Decision]:
        """Steps for ``seconds`` with the same signals; the decisions made."""
        return [self.step(**obs) for _ in range(round(seconds / self.cycle))]


def decode_time(steps: StepTimes, per_replica: float, limit: float, *,
                prompt: float = PROMPT, output: float = OUTPUT) -> tuple[float, float]:
    """(mean ms per output token, mean decode batch) of a replica with step times ``steps``
    finishing ``per_replica`` requests per second, as the law's model reads it: prefill
    takes a share ``f = per_replica x prefill / 1000`` of the replica's time and stretches
    every step, ``m = step(b) / (1 - f)``, and the batch is Little's law,
    ``b = per_replica x output x m / 1000`` (at most ``limit``); solved by iteration."""
    f = min(0.9, per_replica * steps.prefill_request_ms(prompt) / 1000.0)
    ctx = decode_context(prompt, output)
    m = steps.step_ms(1, context=ctx) / (1.0 - f)
    for _ in range(200):
        b = max(1.0, min(limit, per_replica * output * m / 1000.0))
        m = steps.step_ms(b, context=ctx) / (1.0 - f)
    return m, max(1.0, min(limit, per_replica * output * m / 1000.0))


def prefill_time(steps: StepTimes, per_replica: float, decode_ms: float, *,
                 prompt: float = PROMPT, output: float = OUTPUT) -> float:
    """Mean prefill time (ms) of a replica with step times ``steps`` finishing
    ``per_replica`` requests per second whose tokens take ``decode_ms`` each, as the law's
    model reads it with no chunk budget known: one step beside the decode batch (Little's
    law) plus the prompt's own work, stretched by ``1 / (1 - f)`` at the prefill share
    ``f`` of the replica's time."""
    b = max(1.0, per_replica * output * decode_ms / 1000.0)
    work = steps.prefill_request_ms(prompt)
    share = min(0.9, per_replica * work / 1000.0)
    return (steps.step_ms(b, context=decode_context(prompt, output)) + work) / (1.0 - share)


def history(n: int, *, since: float, until: float = T0, step: float = 15.0
            ) -> tuple[tuple[float, int], ...]:
    """Recommendations of ``n`` replicas every ``step`` seconds from ``since`` to ``until``."""
    out = []
    t = since
    while t < until:
        out.append((t, n))
        t += step
    return tuple(out)


def make_state(**fields: Any) -> ControlState:
    return ControlState(**fields)


def opt(variant: str, product: str, *, price: float = 1.0, rate: float = 1.0, gpus: int = 1,
        free: int = 0, current: int = 0, scheduled: int | None = None,
        ready: int | None = None, pending: int = 0, pref: int | None = None,
        meets: bool = True) -> VariantOption:
    """A placement option in one line: scheduled defaults to current less pending, ready to
    scheduled."""
    scheduled = current - pending if scheduled is None else scheduled
    return VariantOption(variant, product, gpus, price, rate, meets, free, current,
                         scheduled, scheduled if ready is None else ready, pending, pref)
