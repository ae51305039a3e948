"""Peer autoscaling rules: their arithmetic on small tables, and through act() on faked
services and scrapes."""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import cast

import pytest

from slo_devtools.sim.bench import TARGETS, step_model
from slo_devtools.sim.discrete_event import Service, Simulation
from slo_devtools.sim.policies import (
    OPERATOR_PERIOD_S,
    Context,
    DynamoPlanner,
    ForwardPass,
    FpmRegression,
    HpaBehavior,
    LlmdSlo,
    Objectives,
    Schedule,
    SloOperator,
    apa_desired,
    dynamo_agg_desired,
    forward_pass,
    hpa_average_value,
    kpa_desired,
    llmd_behavior,
    llmd_desired,
    llmd_slo_signal,
    policy_spec,
    wva_saturation,
)
from slo_devtools.sim.run import RunResult, Tenant, Workload, simulate
from slo_devtools.sim.scrape import Scraper
from slo_devtools.sim.traces import Request, Trace
from slo_operator.control.capacity import MIN_CHUNK
from slo_operator.reconcile.chunking import MISS_INTERVAL_S
from slo_operator.settings import OperatorSettings


@pytest.mark.parametrize(("total", "target", "current", "want"), [
    pytest.param(0.0, 1.0, 4, 0, id="queue-reads-zero-asks-for-nothing"),
    pytest.param(10.0, 5.0, 1, 2, id="ceil-of-total-over-target"),
    pytest.param(21.0, 5.0, 4, 4, id="inside-10pct-tolerance-holds"),
    pytest.param(23.0, 5.0, 4, 5, id="outside-tolerance-scales"),
])
def test_hpa_average_value(total: float, target: float, current: int, want: int) -> None:
    assert hpa_average_value(total, target, current) == want


def test_hpa_scale_down_waits_for_the_stabilization_window() -> None:
    b = HpaBehavior(down_window_s=300.0)
    assert b.apply(8, 4, 0.0) == 8
    assert b.apply(2, 8, 100.0) == 8  # the 8 of t=0 is still in the window
    assert b.apply(2, 8, 301.0) == 2


def test_hpa_scale_up_rate_counts_from_the_replicas_at_the_period_start() -> None:
    b = HpaBehavior()
    assert b.apply(40, 2, 0.0) == 6  # max(2 x 2, 2 + 4)
    assert b.apply(40, 6, 10.0) == 6  # 4 pods already added within the 15 s period
    assert b.apply(40, 6, 15.0) == 12  # a new period: max(2 x 6, 6 + 4)
    b = HpaBehavior(down_window_s=0.0)
    assert b.apply(2, 8, 0.0) == 2
    # The 6 pods removed 5 s ago count back: the period started at 8 replicas.
    assert b.apply(40, 2, 5.0) == 16


def test_hpa_scale_up_stabilization_takes_the_lowest_recent_recommendation() -> None:
    b = llmd_behavior()  # 30 s up window
    assert b.apply(4, 4, 0.0) == 4
    assert b.apply(8, 4, 15.0) == 4  # the 4 of t=0 is within 30 s
    assert b.apply(8, 4, 30.0) == 8


def test_hpa_pods_policy_removes_one_pod_per_period() -> None:
    b = llmd_behavior()  # down: 180 s window, 1 pod per 120 s
    cur = b.apply(8, 8, 0.0)
    seen = []
    for t in range(15, 600, 15):
        cur = b.apply(1, cur, float(t))
        seen.append((t, cur))
    assert all(n == 8 for t, n in seen if t < 180)  # the 8 of t=0 holds for 180 s
    downs = [t for (_, before), (t, n) in itertools.pairwise(seen) if n < before]
    assert [n for t, n in seen if t == 180] == [7]
    assert downs == [180, 300, 420, 540]  # then one pod every 120 s


@pytest.mark.parametrize(("stable", "panic", "ready", "panicking", "cur", "want"), [
    pytest.param(60.0, 60.0, 2, False, 2, (2, False), id="steady"),
    pytest.param(40.0, 200.0, 2, False, 2, (7, True), id="burst-enters-panic"),
    pytest.param(10.0, 10.0, 7, True, 7, (7, True), id="no-scale-down-while-panicking"),
    pytest.param(10.0, 10.0, 7, False, 7, (1, False), id="calm-scales-down"),
])
def test_kpa(stable: float, panic: float, ready: int, panicking: bool, cur: int,
             want: tuple[int, bool]) -> None:
    assert kpa_desired(stable, panic, 30.0, ready, panicking, cur) == want


@pytest.mark.parametrize(("ttft", "tpot", "want"), [
    pytest.param(None, None, 0.0, id="idle-reads-zero"),
    pytest.param(1.5, 0.02, 0.5, id="ttft-ratio"),
    pytest.param(0.3, 0.08, 0.8, id="tpot-ratio"),
    pytest.param(6.0, None, 2.0, id="exactly-the-cap"),
    pytest.param(90.0, 0.05, 2.0, id="knee-spike-clamped-at-2"),
])
def test_llmd_signal_is_the_worst_ratio_clamped_at_two(ttft: float | None, tpot: float | None,
                                                       want: float) -> None:
    assert llmd_slo_signal(ttft, tpot, 3.0, 0.1) == pytest.approx(want)


@pytest.mark.parametrize(("s", "n", "ready", "want"), [
    pytest.param(1.1, 4, 4, 8, id="up-proportional-to-the-signal"),
    pytest.param(1.1, 4, 2, 4, id="credit-half-ready-covers-the-deficit"),
    pytest.param(0.66, 5, 5, 6, id="up-by-ceil"),
    pytest.param(0.5, 4, 2, 4, id="hysteresis-band-holds"),
    pytest.param(0.2, 4, 2, 2, id="down-is-uncredited"),
    pytest.param(0.0, 6, 6, 0, id="idle-asks-for-nothing"),
])
def test_llmd_formula(s: float, n: int, ready: int, want: int) -> None:
    assert llmd_desired(s, n, ready) == want


@dataclass
class FakeScraper:
    """Serves the P90 TTFT a test sets (seconds); no TPOT."""

    ttft_p90: float | None = None
    calls: list[tuple[str, float, float]] = field(default_factory=list)

    def quantile(self, name: str, family: str, q: float, now: float, window: float
                 ) -> float | None:
        self.calls.append((family, q, window))
        return self.ttft_p90 if family == "ttft" else None


@dataclass
class FakeService:
    desired: int
    n_ready: int
    name: str = "svc"

    def ready(self) -> list[object]:
        return [object()] * self.n_ready


def fake_context(svc: object, scraper: object, ttft_ms: float = 1000.0,
                 itl_ms: float = 100.0) -> Context:
    return Context(cast(Service, svc), cast(Scraper, scraper),
                   Objectives(10_000, ttft_ms, itl_ms), step_model(), max_replicas=16)


def test_llmd_averages_the_clamped_signal_over_45_s() -> None:
    pol, scr, svc = LlmdSlo(), FakeScraper(), FakeService(4, 4)
    ctx = fake_context(svc, scr)
    scr.ttft_p90 = 30.0  # 30x the SLO, clamped to 2.0
    pol.act(ctx, 0.0)
    assert scr.calls[0] == ("ttft", 0.9, 60.0)  # P90 over 1 m
    scr.ttft_p90 = 0.1
    pol.act(ctx, 15.0)
    act = pol.act(ctx, 30.0)
    assert act.reason == "signal 0.73"  # (2.0 + 0.1 + 0.1) / 3: the spike counts as 2
    act = pol.act(ctx, 45.0)
    assert act.reason == "signal 0.10"  # t=0 left the window


def test_llmd_scales_out_through_the_hpa_and_in_one_pod_per_120_s() -> None:
    pol, scr, svc = LlmdSlo(), FakeScraper(ttft_p90=0.5), FakeService(4, 4)
    ctx = fake_context(svc, scr)
    replicas = []
    for t in range(0, 900, 15):
        if t == 30:
            scr.ttft_p90 = 1.1  # over 0.55 of the SLO
        if t == 120:
            scr.ttft_p90 = 0.0  # idle from here
        act = pol.act(ctx, float(t))
        assert act.replicas is not None
        svc.desired = svc.n_ready = act.replicas
        replicas.append((t, act.replicas))
    # The first ask (t=30) waits one poll for the 30 s up window.
    assert [n for t, n in replicas if t <= 30] == [4, 4, 4]
    assert next(t for t, n in replicas if n > 4) == 45
    # The last poll asking for the top count is t=135 (13 of 14 is within the HPA's 10%
    # tolerance); from 180 s later, one pod every 120 s.
    downs = [t for (_, before), (t, n) in itertools.pairwise(replicas) if n < before]
    assert downs == [315, 435, 555, 675, 795]


def test_dynamo_regression_recovers_a_linear_step_law() -> None:
    reg = FpmRegression()
    for i in range(40):
        p, kv = (i % 5) * 400, (i % 7) * 20_000 + 1000
        reg.add(ForwardPass(0.004 + 2e-5 * p + 5e-8 * kv, 1 if p else 0, p, 8, kv))
    assert reg.predict(1000, 50_000) == pytest.approx(0.004 + 0.02 + 0.0025, rel=1e-6)
    # The next TTFT: the queue plus a mean-length prompt in 2048-token chunks.
    isl = reg.avg_isl.value
    assert reg.ttft(4096, 2048, 0) == pytest.approx(
        2 * (0.004 + 2e-5 * 2048) + 0.004 + 2e-5 * isl, rel=1e-6)


def test_dynamo_regression_rejects_a_fit_with_a_negative_coefficient() -> None:
    reg = FpmRegression()
    for i in range(10):
        reg.add(ForwardPass(0.05 - 1e-5 * i * 100, 1, i * 100, 1, 1000 + i))
    assert reg.has_sufficient_data()
    assert reg.predict(100, 1000) is None


def fitted() -> FpmRegression:
    reg = FpmRegression()
    for i in range(20):
        p, kv = (i % 4) * 512, (i % 5) * 50_000
        reg.add(ForwardPass(0.005 + 2.3e-5 * p + 4.5e-8 * kv, 1 if p else 0, p, 16, kv))
    return reg


def engine(queued: int, kv: int) -> ForwardPass:
    return ForwardPass(0.02, 0, 0, 32, kv, queued)


@pytest.mark.parametrize(("engines", "n", "want"), [
    pytest.param([engine(400_000, 300_000)] * 3, 3, 4, id="every-engine-over-ttft-one-more"),
    pytest.param([engine(400_000, 300_000), engine(0, 50_000)], 2, 2,
                 id="one-engine-under-sla-no-scale-up"),
    pytest.param([engine(0, 20_000)] * 4, 4, 3, id="idle-one-fewer"),
    pytest.param([engine(0, 20_000)], 1, 1, id="never-below-one"),
    pytest.param([engine(6000, 200_000)] * 2, 2, 2, id="consolidated-queue-refuses-down"),
    pytest.param([engine(1000, 200_000)] * 2, 2, 1, id="small-queue-consolidates"),
])
def test_dynamo_moves_one_replica_per_interval(engines: list[ForwardPass], n: int,
                                               want: int) -> None:
    assert dynamo_agg_desired(fitted(), engines, n, ttft_ms=500.0, itl_ms=75.0,
                              budget=2048, max_kv_tokens=880_000) == want


def test_dynamo_itl_side_alone_scales_up() -> None:
    # ITL over the SLA everywhere while TTFT is fine: the decode side asks for one more.
    want = dynamo_agg_desired(fitted(), [engine(0, 800_000)] * 2, 2, ttft_ms=5000.0,
                              itl_ms=30.0, budget=2048, max_kv_tokens=880_000)
    assert want == 3


def test_dynamo_planner_observes_only_while_scaling_is_in_progress() -> None:
    m = step_model()
    busy = SimpleNamespace(busy=True, seg_p=0, n_dec=200, base_ctx=1_000_000, dstep=0,
                           prefilling=[], waiting=[SimpleNamespace(prefill_left=300_000)],
                           seg_dt0=0.08, model=m)
    svc = FakeService(2, 2)
    svc.ready = lambda: [busy, busy]  # type: ignore[method-assign]
    ctx = fake_context(svc, FakeScraper(), ttft_ms=500.0, itl_ms=75.0)
    ctx.svc.budget = 2048
    pol = DynamoPlanner(regression=fitted())
    act = pol.act(ctx, 5.0)
    assert act.replicas == 3  # +1, not the many a queue this long would "need"
    svc.desired = 3  # asked for; the new replica is still starting
    assert pol.act(ctx, 10.0).replicas is None
    assert pol.regression.count > 20  # it kept learning meanwhile


def test_forward_pass_reports_the_step_a_replica_runs() -> None:
    sim = Simulation()
    m = step_model()
    svc = Service(sim, "svc", m, replicas=1)
    rep = svc.ready()[0]
    assert forward_pass(rep) == ForwardPass()  # idle: the all-zero heartbeat
    for _ in range(2):
        svc.arrive(Request(0.0, 3000, 1000, "svc"), 0.0)
    f = forward_pass(rep)
    assert (f.prefill_tokens, f.prefill_requests, f.decode_requests) == (2048, 1, 0)
    assert f.queued_prefill_tokens == 2 * 3000 - 2048
    assert f.wall_time_s == pytest.approx(m.prefill_ms(2048) / 1e3)
    sim.run([], lambda r: svc, 1.0)
    f = forward_pass(rep)  # both prompts done: decoding, nothing queued
    assert f.decode_requests == 2 and f.queued_prefill_tokens == 0 and f.prefill_tokens == 0
    assert f.decode_kv_tokens >= 2 * 3001


@pytest.mark.parametrize(("reps", "want"), [
    pytest.param([], 1, id="nothing-ready"),
    pytest.param([(0, 10, 0.05), (0, 12, 0.04)], -1, id="idle-pair-one-can-go"),
    pytest.param([(0, 10, 0.05)], 0, id="single-idle-stays"),
    pytest.param([(6, 256, 0.3), (0, 200, 0.75)], 1, id="one-saturated-one-low-spare"),
    pytest.param([(2, 256, 0.3), (3, 256, 0.2)], 1, id="queues-eat-the-spare"),
    pytest.param([(0, 100, 0.5), (0, 90, 0.5)], 0, id="spare-without-a-replica-less"),
])
def test_wva_saturation(reps: list[tuple[int, int, float]], want: int) -> None:
    assert wva_saturation(reps) == want


@pytest.mark.parametrize(("cur", "value", "target", "want"), [
    pytest.param(4, 32.0, 32.0, 4, id="on-target"),
    pytest.param(4, 34.0, 32.0, 4, id="inside-band"),
    pytest.param(4, 64.0, 32.0, 8, id="double"),
    pytest.param(4, 200.0, 32.0, 8, id="at-most-2N"),
    pytest.param(8, 1.0, 32.0, 4, id="at-least-N-over-2"),
])
def test_apa(cur: int, value: float, target: float, want: int) -> None:
    assert apa_desired(cur, value, target) == want


def test_schedule_starts_replicas_one_cold_start_ahead() -> None:
    s = Schedule([1, 1, 5, 1], window_s=60.0, lead_s=62.0, period_s=5.0)
    assert s.want(0.0) == 1
    assert s.want(60.0 - 62.0 - 5.0 + 60.0) == 5  # 53 s: window 2 is within the lead
    assert s.want(180.0) == 1


def test_operator_period_matches_the_operator() -> None:
    assert OperatorSettings().interval == OPERATOR_PERIOD_S


# --- the operator's jitter lever through the simulator (docs/slo-loop.md, "The jitter lever")
# Long prompts (log-normal around 4,000 tokens) and short answers (around 20 tokens) at
# 4 req/s for 15 minutes: most streams meet a prefill chunk or two in their few steps.
JITTER_OBJ = replace(TARGETS["loose"]["long"], jitter_max=0.3)
JITTER_SPAN_S = 900.0


def _jitter_trace() -> Trace:
    rng, reqs, t = random.Random(3), [], 0.0
    while t < JITTER_SPAN_S:
        t += rng.expovariate(4.0)
        reqs.append(Request(t, int(rng.lognormvariate(8.3, 0.6)),
                            int(rng.lognormvariate(3.0, 1.0)) + 1, "s"))
    return Trace("long-prompts-short-answers", tuple(reqs), JITTER_SPAN_S)


def _jitter_run(lever: bool) -> tuple[RunResult, list[tuple[float, int]]]:
    op = SloOperator(policy_spec(JITTER_OBJ, 8), jitter_lever=lever)
    tenant = Tenant("s", step_model(), JITTER_OBJ, max_replicas=8, budget_settable=True)
    run = simulate(Workload("w", _jitter_trace(), (tenant,)), {"s": op}, initial={"s": 3})
    moves = [(at, int(msg.split(" -> ")[1].split()[0]))
             for at, reason, msg in op.reasons if reason == "ChunkBudgetChanged"]
    return run, moves


def _median_jitter(run: RunResult, since: float) -> float:
    return statistics.median(w.jitter for w in run.tenants["s"].windows
                             if w.jitter is not None and w.start >= since)


def test_jitter_over_its_bound_lowers_the_budget_step_by_step_and_the_spread_falls() -> None:
    off, off_moves = _jitter_run(lever=False)
    on, on_moves = _jitter_run(lever=True)
    assert off_moves == []  # the inter-token objective alone keeps its first budget
    budgets = [b for _, b in on_moves]
    assert len(budgets) >= 2 and budgets == sorted(budgets, reverse=True)
    assert min(budgets) >= MIN_CHUNK
    times = [at for at, _ in on_moves]
    assert all(b - a >= MISS_INTERVAL_S for a, b in itertools.pairwise(times))
    # After the last move's successors serve, the spread is well under the unlevered one
    # (the square-root law: a budget a quarter the size halves it).
    settled = times[-1] + 120.0
    assert _median_jitter(on, settled) < 0.75 * _median_jitter(off, settled)
