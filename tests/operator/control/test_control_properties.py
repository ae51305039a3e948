"""Properties of decide() over arbitrary observations: it never raises, and its outputs
always respect the bounds a user set, whatever the metrics say (NaN and Inf included)."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)
from slo_operator.control import ControlState, GpuRequest, arbitrate, decide
from tests.operator.control.control_support import KEY, T0, make_policy

anything = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                     st.floats(min_value=0, max_value=1e6))
counts = st.integers(min_value=0, max_value=20)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    sig = Signals(
        state=draw(st.sampled_from(list(MetricsState))),
        e2e_ms=draw(anything), ttft_ms=draw(anything), itl_ms=draw(anything),
        jitter=draw(anything), request_rate=draw(anything),
        prompt_tokens_rate=draw(anything), generation_tokens_rate=draw(anything),
        waiting=draw(anything), running=draw(anything),
        kv_usage=draw(st.one_of(st.none(), st.floats(min_value=0, max_value=1))),
        preemptions_rate=draw(anything),
    )
    ready = draw(counts)
    return Observation(
        key=KEY, now=T0, signals=sig,
        replicas=ReplicaCounts(desired=draw(counts), ready=ready,
                               warming=draw(st.integers(0, ready)), starting=draw(counts),
                               pending=draw(counts)),
        batch_limit=draw(st.integers(0, 512)), max_batch=draw(st.integers(1, 512)),
        hardware=draw(st.sampled_from(["", "H100-SXM5-80GB", "NVIDIA H200", "weird"])),
        precision=draw(st.sampled_from(["bf16", "fp16", "fp8"])),
        model_size_b=draw(st.one_of(st.none(), st.floats(min_value=0.5, max_value=500))),
        gpus_per_replica=draw(st.integers(1, 8)),
    )


@given(obs=observations(), mode=st.sampled_from(["live", "restart", "off"]),
       lo=st.integers(0, 3), span=st.integers(0, 10),
       itl=st.one_of(st.none(), st.floats(min_value=5, max_value=500)))
@settings(max_examples=500, deadline=None)
def test_decisions_stay_inside_the_users_bounds(obs: Observation, mode: str, lo: int,
                                                span: int, itl: float | None) -> None:
    pol = make_policy(min_replicas=lo, max_replicas=max(1, lo + span), batching_mode=mode,
                      scale_to_zero=lo == 0, itl_target_ms=itl)
    d = decide(obs, pol, ControlState(), T0)
    assert pol.min_replicas <= d.replicas <= pol.max_replicas
    assert d.reason and d.message
    assert d.need is None or not math.isnan(d.need)
    if mode == "off":
        assert d.batch_limit == obs.batch_limit
    elif d.valid and d.batch_limit != obs.batch_limit:
        ceiling = min(pol.max_batch, obs.max_batch)
        assert min(pol.min_batch, ceiling) <= d.batch_limit <= ceiling
    if not d.valid and obs.replicas.desired > 0:
        assert d.replicas > 0  # never to zero for lack of data
    # The new state survives status (strict JSON: no NaN or Infinity for the API server).
    wire = json.loads(json.dumps(d.state.to_dict(), allow_nan=False))
    assert ControlState.from_dict(wire).to_dict() == d.state.to_dict()


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[GpuRequest], dict[str, int], dict[str, int | None]]:
    pools, tenants = ["H100", "A100"], ["t1", "t2", "t3"]
    reqs = [GpuRequest(ServiceKey("ns", f"s{i}"), draw(st.integers(0, 12)),
                       draw(st.integers(0, 8)), draw(st.integers(1, 4)),
                       draw(st.integers(0, 3)), draw(st.sampled_from(tenants)),
                       draw(st.sampled_from(pools)), draw(st.integers(0, 2)))
            for i in range(draw(st.integers(1, 8)))]
    free = {p: draw(st.integers(0, 16)) for p in pools}
    budgets = {t: draw(st.one_of(st.none(), st.integers(0, 40))) for t in tenants}
    return reqs, free, budgets


@given(fleet=fleets())
@settings(max_examples=300, deadline=None)
def test_grants_respect_pools_budgets_and_priorities(
        fleet: tuple[list[GpuRequest], dict[str, int], dict[str, int | None]]) -> None:
    reqs, free, budgets = fleet
    grants = arbitrate(reqs, free, budgets)
    for pool in free:
        mine = [r for r in reqs if r.pool == pool]
        used = sum(grants[r.key].replicas * r.gpus_per_replica for r in mine)
        held = sum(r.held * r.gpus_per_replica for r in mine)
        assert used <= held + free[pool]
    for tenant, budget in budgets.items():
        if budget is not None:
            used = sum(grants[r.key].replicas * r.gpus_per_replica
                       for r in reqs if r.tenant == tenant)
            assert used <= budget
    for r in reqs:
        g = grants[r.key]
        assert 0 <= g.replicas <= max(r.wanted, 0)
        assert (g.reason is None) == (g.replicas >= r.wanted)
