"""Builders for control-law tests: observations, policies and states in one line each."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slo_operator.api.models import SLOPolicySpec
from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)
from slo_operator.control import ControlPolicy, ControlState, policy_for
from slo_operator.control.capacity import DEFAULT_STEP_TIMES, rate_at_batch
from slo_operator.control.placement import VariantOption

T0 = 1_800_000_000.0
KEY = ServiceKey("team-a", "chat")
PROMPT, OUTPUT = 500.0, 200.0
# Requests per second one replica is planned for with these shapes at batch 64 (~22.5).
PER_REPLICA = rate_at_batch(DEFAULT_STEP_TIMES, 64, PROMPT, OUTPUT)


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
                 prompt: float = PROMPT, output: float = OUTPUT) -> Signals:
    r = rate or 0.0
    return Signals(
        state=state, e2e_ms=e2e, ttft_ms=ttft, itl_ms=itl, request_rate=rate,
        prompt_tokens_rate=r * prompt, generation_tokens_rate=gen_rate if gen_rate is not None
        else r * output, waiting=waiting, running=running, sample_time=T0,
    )


def make_obs(*, desired: int = 2, ready: int | None = None, warming: int = 0,
             starting: int = 0, pending: int = 0, batch_limit: int = 64, max_batch: int = 64,
             gpus_per_replica: int = 1, now: float = T0, **signals: Any) -> Observation:
    return Observation(
        key=KEY, now=now, signals=make_signals(**signals),
        replicas=ReplicaCounts(desired=desired, ready=desired if ready is None else ready,
                               warming=warming, starting=starting, pending=pending),
        batch_limit=batch_limit, max_batch=max_batch, hardware="H200", precision="bf16",
        gpus_per_replica=gpus_per_replica,
    )


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
