"""One benchmark run: a workload, one policy per tenant, ground-truth window statistics.

The policies observe through :class:`~slo_devtools.sim.scrape.Scraper` (Prometheus-like);
the *report* judges every 1-minute window from the exact per-request and per-token
latencies of the simulation (not from bucket interpolation), so a policy cannot look good
by the coarseness of vLLM's buckets. Attainment is reported over every window and over
the windows after a warm-up (:data:`WARMUP_S`), when every policy has had time to act.

A tenant's replicas run with its ``true_model`` when it has one (a fleet faster or slower
than its profile says); policies are handed ``model``, the profile the operator seeds
with, and never see the true one. The oracle and static runs simulate the true fleet.

Scale to zero: a tenant with an ``activator`` is served through one while it has no Ready
replica (``discrete_event.Activator``); each wake the activator writes runs the tenant's
policy at once (the operator's watch on the wake annotation), besides its periodic passes.
Windows are judged twice: pod-side (``windows``, what the SLO windows of the cluster see:
a held request counts from when the activator forwarded it) and client-side
(``client_windows``: from when the client sent it, and a window in which the activator
answered a request 429 or 504 is not good).

Chunked-prefill budget: replicas start with the tenant's ``max_num_batched_tokens``. Where
the tenant lets policies choose it (``budget_settable``), a policy may set it before the
run (an ``initial_chunk_budget(ctx)`` method returning the value its Deployment would be
rendered with, or None) and at any pass (``Action.chunk_budget``: a rolling update,
``Service.set_budget``); elsewhere the budget is pinned and both are ignored.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from slo_devtools.sim.discrete_event import (
    ITL_BIN_S,
    Activator,
    ColdStart,
    Failed,
    Finished,
    Phase,
    Service,
    Simulation,
)
from slo_devtools.sim.policies import Context, Objectives, Policy
from slo_devtools.sim.scrape import Scraper
from slo_devtools.sim.traces import Request, Trace
from slo_runtime.stepmodel import StepModel

# Windows starting before this many seconds are left out of the after-warm-up attainment:
# ten minutes covers a policy's first window of metrics, a cold start and a few passes.
WARMUP_S = 600.0


@dataclass(frozen=True)
class Tenant:
    """One service of a workload: its model, engine settings, objectives and bounds.

    ``model`` is the profile policies see; ``true_model`` (default: the same) is what the
    replicas really run."""

    name: str
    model: StepModel
    objectives: Objectives
    max_replicas: int = 16
    min_replicas: int = 1
    initial_replicas: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    routing: str = "bound"
    precision: str = "bf16"
    true_model: StepModel | None = None
    budget_settable: bool = False  # may a policy choose --max-num-batched-tokens?
    prefix_routing: bool = True  # a later turn goes to the replica holding its prefix
    activator: Activator | None = None  # scale to zero: held while no replica is Ready

    @property
    def replica_model(self) -> StepModel:
        """The step model the tenant's replicas run."""
        return self.true_model or self.model


@dataclass(frozen=True)
class Workload:
    name: str
    trace: Trace
    tenants: tuple[Tenant, ...]

    def tenant(self, name: str) -> Tenant:
        """The tenant called ``name``."""
        return next(t for t in self.tenants if t.name == name)


@dataclass(frozen=True)
class WindowStat:
    """Ground truth of one tenant's 1-minute window (requests finished in it)."""

    start: float
    arrivals: int
    finished: int
    e2e_p99: float | None
    ttft_p95: float | None
    itl_p99: float | None
    jitter: float | None
    good: bool


@dataclass
class TenantResult:
    name: str
    windows: list[WindowStat]
    gpu_seconds: float
    scale_actions: int
    limit_changes: int
    preemptions: int
    series: list[tuple[float, int, int, int]]  # (t, replicas incl. starting/draining, ready, limit)
    e2e_p99: float | None = None  # over every request finished within the trace (s)
    ttft_p95: float | None = None
    pool_gpu_seconds: dict[str, float] = field(default_factory=dict)  # by GPU pool
    warmup_s: float = WARMUP_S
    budget: int = 0  # --max-num-batched-tokens at the end of the run
    budget_changes: int = 0
    prefix_hit_share: float | None = None  # prompt tokens found cached / looked up
    # Scale to zero (a tenant with an activator): client-side windows (from the client's
    # send, failures count), the wakes, each forwarded held request's wait, the failures.
    client_windows: list[WindowStat] | None = None
    cold_starts: tuple[ColdStart, ...] = ()
    held_waits: tuple[float, ...] = ()
    failed: tuple[Failed, ...] = ()
    zero_s: float = 0.0  # seconds of the trace the policy wanted zero replicas

    def attainment_from(self, start: float) -> float:
        """Good windows over windows with finished requests, of those starting at or
        after ``start`` seconds."""
        busy = [w for w in self.windows if w.finished and w.start >= start]
        return sum(w.good for w in busy) / len(busy) if busy else 1.0

    @property
    def attainment(self) -> float:
        """Good windows over windows with finished requests."""
        return self.attainment_from(0.0)

    @property
    def warm_attainment(self) -> float:
        """Attainment over the windows after the warm-up."""
        return self.attainment_from(self.warmup_s)


@dataclass
class RunResult:
    policy: str
    workload: str
    tenants: dict[str, TenantResult]
    cpu_s: float
    sim_s: float

    @property
    def gpu_hours(self) -> float:
        return sum(t.gpu_seconds for t in self.tenants.values()) / 3600.0

    @property
    def attainment(self) -> float:
        """Good (tenant, window) pairs over all pairs with traffic."""
        busy = [w for t in self.tenants.values() for w in t.windows if w.finished]
        return sum(w.good for w in busy) / len(busy) if busy else 1.0

    @property
    def min_attainment(self) -> float:
        return min(t.attainment for t in self.tenants.values())

    @property
    def min_warm_attainment(self) -> float:
        """The worst tenant's attainment after the warm-up."""
        return min(t.warm_attainment for t in self.tenants.values())

    @property
    def scale_actions(self) -> int:
        return sum(t.scale_actions for t in self.tenants.values())

    @property
    def limit_changes(self) -> int:
        return sum(t.limit_changes for t in self.tenants.values())

    @property
    def mean_replicas(self) -> float:
        return self.gpu_hours * 3600.0 / self.sim_s if self.sim_s else 0.0


def percentile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1) of ``xs``; None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _bins_pct(bins: Sequence[int] | None, q: float) -> float | None:
    if not bins:
        return None
    total = sum(bins)
    if total <= 0:
        return None
    rank = q * total
    acc = 0
    for i, c in enumerate(bins):
        acc += c
        if acc >= rank:
            return (i + 1) * ITL_BIN_S
    return len(bins) * ITL_BIN_S


def jitter_of(done: Sequence[Finished]) -> float | None:
    """CV of per-request time per output token (decode speed instability) in a window."""
    tpot = [(f.done - f.first) / (f.output - 1) for f in done if f.output > 1]
    if len(tpot) < 2:
        return None
    m = statistics.fmean(tpot)
    return statistics.pstdev(tpot) / m if m > 0 else None


def window_stats(finished: Sequence[Finished], itl_bins: Mapping[int, Sequence[int]],
                 arrivals: Sequence[float], start: float, end: float, window_s: float,
                 obj: Objectives, failed: Sequence[Failed] = ()) -> list[WindowStat]:
    """Per-window ground truth over [start, end) for requests finished in each window; a
    window in which a request ``failed`` (answered without a replica) is not good."""
    n = max(1, math.ceil((end - start) / window_s))
    by: list[list[Finished]] = [[] for _ in range(n)]
    arr = [0] * n
    bad = [0] * n
    for f in finished:
        i = int((f.done - start) // window_s)
        if 0 <= i < n:
            by[i].append(f)
    for x in failed:
        i = int((x.at - start) // window_s)
        if 0 <= i < n:
            bad[i] += 1
    for t in arrivals:
        i = int((t - start) // window_s)
        if 0 <= i < n:
            arr[i] += 1
    out = []
    w0 = int(start // window_s)
    for i in range(n):
        done = by[i]
        e2e = percentile([f.done - f.t for f in done], 0.99)
        ttft = percentile([f.first - f.t for f in done], 0.95)
        itl = _bins_pct(itl_bins.get(w0 + i), 0.99)
        jit = jitter_of(done)
        good = not bad[i] and (e2e is None or e2e * 1e3 <= obj.e2e_ms) and \
            (ttft is None or ttft * 1e3 <= obj.ttft_ms) and \
            (itl is None or itl * 1e3 <= obj.itl_p99_ms) and \
            (obj.jitter_max is None or jit is None or jit <= obj.jitter_max)
        out.append(WindowStat(start + i * window_s, arr[i], len(done) + bad[i], e2e, ttft,
                              itl, jit, good))
    return out


def zero_seconds(events: Sequence[tuple[float, int, int]], end: float) -> float:
    """Seconds of [0, end) during which the desired replicas (``Service.events``) were 0."""
    total, since = 0.0, None
    for at, desired, _ in events:
        if at >= end:
            break
        if desired == 0 and since is None:
            since = at
        elif desired != 0 and since is not None:
            total += at - since
            since = None
    return total + (end - since if since is not None else 0.0)


def as_sent(finished: Sequence[Finished]) -> list[Finished]:
    """``finished`` timed from when each client sent its request (the activator's wait in)."""
    return [f if f.arrived < 0 or f.arrived == f.t else replace(f, t=f.arrived)
            for f in finished]


class Placer(Protocol):
    """Puts a policy's total replicas on GPU pools (mixed fleets, ``sim.fleet``)."""

    @property
    def hardware(self) -> str: ...  # the GPU product the policy sizes replicas for

    @property
    def precision(self) -> str: ...

    @property
    def model(self) -> StepModel: ...  # that product's step model (what a profile shows)

    def apply(self, svc: Service, total: int, now: float, warm: bool = False) -> None: ...


def build_sim(workload: Workload, requests: Sequence[Request] | None = None, *,
              replicas: Mapping[str, int] | None = None, start: float = 0.0,
              warm: bool = True, routing: str | None = None
              ) -> tuple[Simulation, dict[str, Service]]:
    """A simulation with one service per tenant (``replicas`` each, warm by default)."""
    sim = Simulation()
    sim.now = start
    services = {}
    for t in workload.tenants:
        n = (replicas or {}).get(t.name, t.initial_replicas)
        services[t.name] = Service(sim, t.name, t.replica_model, replicas=n,
                                   max_num_seqs=t.max_num_seqs,
                                   max_num_batched_tokens=t.max_num_batched_tokens,
                                   routing=routing or t.routing, warm=warm,
                                   prefix_routing=t.prefix_routing, activator=t.activator)
    sim.services = services
    return sim, services


def _context(t: Tenant, svc: Service, scraper: Scraper, placer: Placer | None) -> Context:
    """What a policy of tenant ``t`` may read: the profile's model, never the true one."""
    ctx = Context(svc, scraper, t.objectives, t.model, min_replicas=t.min_replicas,
                  max_replicas=t.max_replicas, precision=t.precision)
    if placer is not None:
        ctx = replace(ctx, model=placer.model, hardware=placer.hardware,
                      precision=placer.precision)
    return ctx


def simulate(workload: Workload, policies: Mapping[str, Policy], *, label: str | None = None,
             scrape_s: float = 15.0, window_s: float = 60.0, tail_s: float = 300.0,
             routing: str | None = None, progress: Callable[[float], None] | None = None,
             initial: Mapping[str, int] | None = None,
             placers: Mapping[str, Placer] | None = None) -> RunResult:
    """Replay the workload with one policy per tenant; judge every window from the truth.

    A tenant with a ``placers`` entry runs on GPU pools: its initial replicas and every
    total its policy asks for are placed by the placer (each replica with its pool's step
    model), and its policy sees the placer's hardware and step model."""
    cpu0 = time.process_time()
    trace = workload.trace
    placers = placers or {}
    start_n = {t.name: (initial or {}).get(t.name, t.initial_replicas) for t in workload.tenants}
    sim, services = build_sim(
        workload, replicas={n: 0 if n in placers else k for n, k in start_n.items()},
        routing=routing)
    for n, pl in placers.items():
        pl.apply(services[n], start_n[n], sim.now, warm=True)
    scraper = Scraper(services, scrape_s)
    sim.every(scrape_s, scraper.scrape)
    series: dict[str, list[tuple[float, int, int, int]]] = {n: [] for n in services}

    def record(now: float) -> None:
        for n, svc in services.items():
            ready = sum(1 for r in svc.replicas if r.phase is Phase.READY)
            series[n].append((now, len(svc.replicas), ready, svc.limit))

    sim.every(scrape_s, record)
    for t in workload.tenants:
        pol = policies[t.name]
        placer = placers.get(t.name)
        ctx = _context(t, services[t.name], scraper, placer)
        pick = getattr(pol, "initial_chunk_budget", None)
        if t.budget_settable and callable(pick):
            # The value its Deployment is rendered with: the warm replicas start with it.
            first_budget = pick(ctx)
            if first_budget is not None:
                ctx.svc.start_budget(int(first_budget))

        def tick(now: float, pol: Policy = pol, ctx: Context = ctx,
                 placer: Placer | None = placer, settable: bool = t.budget_settable) -> None:
            act = pol.act(ctx, now)
            if act.limit is not None:
                ctx.svc.set_limit(act.limit, now)
            budget = getattr(act, "chunk_budget", None)
            if settable and budget is not None:
                ctx.svc.set_budget(budget, now)
            if placer is not None:
                # Placed every pass: replicas held for a move or waiting for room settle.
                placer.apply(ctx.svc, ctx.svc.desired if act.replicas is None
                             else act.replicas, now)
            elif act.replicas is not None:
                ctx.svc.set_replicas(act.replicas, now)

        # The trace starts on an empty system: policies start once a whole window of
        # metrics exists (earlier reads undercount requests still in flight); a schedule
        # known in advance (the oracle's) needs no metrics.
        first = 0.0 if getattr(pol, "foresight", False) else window_s + 0.5
        sim.every(pol.period_s, tick, start=first)
        if t.activator is not None:
            ctx.svc.on_wake = tick  # the watch on the wake annotation decides at once
    end = trace.duration
    sim.run(trace.requests, lambda r: services[r.tenant], end + tail_s, progress)
    tenants = {}
    for t in workload.tenants:
        svc = services[t.name]
        arrivals = [r.t for r in trace.requests if r.tenant == t.name]
        wins = window_stats(svc.finished, svc.itl_bins, arrivals, 0.0, end, window_s,
                            t.objectives)
        tenants[t.name] = TenantResult(
            t.name, wins, svc.gpu_seconds(end), svc.scale_actions, svc.limit_changes,
            svc.preemptions, series[t.name],
            e2e_p99=percentile([f.done - f.t for f in svc.finished if f.done < end], 0.99),
            ttft_p95=percentile([f.first - f.t for f in svc.finished if f.done < end], 0.95),
            pool_gpu_seconds=svc.gpu_seconds_by_pool(end), budget=svc.budget,
            budget_changes=svc.budget_changes,
            prefix_hit_share=svc.prefix_hits / svc.prefix_queries if svc.prefix_queries
            else None)
        if t.activator is not None:
            tr = tenants[t.name]
            tr.client_windows = window_stats(as_sent(svc.finished), svc.itl_bins, arrivals, 0.0,
                                             end, window_s, t.objectives, svc.failed)
            tr.cold_starts = tuple(svc.cold_starts)
            tr.held_waits = tuple(svc.held_waits)
            tr.failed = tuple(svc.failed)
            tr.zero_s = zero_seconds(svc.events, end)
    names = {p.name for p in policies.values()}
    return RunResult(label or "/".join(sorted(names)), workload.name, tenants,
                     time.process_time() - cpu0, end)
