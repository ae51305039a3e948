"""A perfect-foresight schedule, the smallest static cluster and a lower bound on GPU-hours.

Oracle: for every tenant and 1-minute window, the fewest warm replicas that meet the
window's objectives, found by simulating that window alone (with the minute before it as
warm-up, so queues carried over are realistic) from the previous window's answer up or
down. The schedule then starts each window's replicas one cold start ahead (perfect
knowledge of the future) and drops them the moment they are no longer needed; the whole
schedule is replayed, and windows it still misses (queues carried across windows) get one
replica more, up to a few rounds. Its GPU-hours are the reference the policies are
compared with; its own attainment is reported next to it.

Static: the fewest replicas per tenant that, fixed for the whole trace, reach the
attainment target.

Lower bound (``lower_bound``): the oracle is a heuristic (a greedy per-window search with
repair rounds), so "x oracle" is soft. Beside it, GPU-seconds below which no policy can
reach the attainment target, from a relaxation in which every simplification lowers the
figure:

* Work. A request costs at least its tokens at :func:`token_costs`' per-token floors: every
  prompt token (less a prefix a cache might hold), every generated token after the first
  at the cheapest batch whose step can still meet the P99 inter-token objective (chunked
  prefill and decoding sharing one weight read, steps packed perfectly, contexts read at
  the measured per-token KV cost, one cached token fewer than the sequence has),
  nothing for preemption, queueing or cold starts. A replica-second does at most a
  replica-second of that work, and a replica counts GPU-seconds from its creation.
* Where the work must happen. A request that meets the e2e objective is served between
  its arrival and arrival + objective; the P99 e2e judgement lets 1% (+1) of a window's
  requests be late, so the most expensive 1% of the arrivals of the window and the one
  before are free, and so are 1% (+1) of their generated tokens (the P99 inter-token
  judgement); a request whose deadline is past the end of the trace is free (no window
  judges it). So in every sub-interval of a window (a 1 s grid) the replicas must hold
  the work of the requests whose whole span lies inside it; disjoint sub-intervals add.
* Windows that may fail. The target lets floor((1 - target) x windows) windows fail; each
  failed window frees its own arrivals and the previous window's (their late requests
  may finish there), taken as the most expensive pairs (or single windows, twice as
  many: the smaller of the two).
* Floor. Every policy here keeps the tenant's ``min_replicas`` at all times.

The bound is max(minimum replicas over the trace + the sub-intervals' work above them,
total work) after the free windows are taken out of each. Premise (of the simulator, not
a relaxation): a late request is late in the window it finishes in, which is its own or
the next unless it finishes in a failed one; replicas serve what they are given in
arrival order, so no replica count parks a window's requests behind later windows'. The
bound ignores queueing and the batches the e2e objective forces small for long outputs,
so it is loose (often half the oracle's GPU-hours); the true minimum lies between the two.
``lower_need`` is, per window, the most replicas any sub-interval needs on average (so at
least that many at the window's peak), capped at ``max_replicas``: a floor for the
oracle's per-window count.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from slo_devtools.sim.policies import Schedule, Static
from slo_devtools.sim.run import RunResult, Tenant, Workload, build_sim, simulate, window_stats
from slo_devtools.sim.traces import Request, Trace
from slo_runtime.stepmodel import StepModel

WARMUP_S = 60.0


def window_ok(workload: Workload, tenant: Tenant, w: int, n: int, window_s: float,
              own: Sequence[Request] | None = None) -> bool:
    """Do ``n`` warm replicas meet window ``w``'s objectives for ``tenant``?"""
    start, end = w * window_s, (w + 1) * window_s
    if own is None:
        own = [r for r in workload.trace.requests if r.tenant == tenant.name]
    times = [r.t for r in own]
    reqs = own[bisect_left(times, start - WARMUP_S):bisect_left(times, end)]
    if not reqs:
        return True
    one = Workload(workload.name, Trace(tenant.name, tuple(reqs), end), (tenant,))
    sim, svcs = build_sim(one, replicas={tenant.name: n}, start=max(0.0, start - WARMUP_S))
    svc = svcs[tenant.name]
    sim.run(reqs, lambda r: svc, end)
    st = window_stats(svc.finished, svc.itl_bins, [r.t for r in reqs if r.t >= start], start,
                      end, window_s, tenant.objectives)
    return all(s.good for s in st)


def per_window_need(workload: Workload, tenant: Tenant, window_s: float = 60.0,
                    progress: Callable[[], None] | None = None) -> list[int]:
    """Fewest warm replicas per window (capped at the tenant's ``max_replicas``)."""
    n_windows = max(1, math.ceil(workload.trace.duration / window_s))
    out: list[int] = []
    n = tenant.min_replicas
    own = [r for r in workload.trace.requests if r.tenant == tenant.name]
    for w in range(n_windows):
        if window_ok(workload, tenant, w, n, window_s, own):
            while n > tenant.min_replicas and \
                    window_ok(workload, tenant, w, n - 1, window_s, own):
                n -= 1
        else:
            while n < tenant.max_replicas:
                n += 1
                if window_ok(workload, tenant, w, n, window_s, own):
                    break
        out.append(n)
        if progress:
            progress()
    return out


@dataclass
class OracleResult:
    need: dict[str, list[int]]  # per tenant, replicas per window
    run: RunResult
    rounds: int
    # Per tenant: the fewest replicas each window's own requests need (``lower_bound``).
    lower_need: dict[str, list[int]] = field(default_factory=dict)
    # Per tenant: no policy meeting the attainment target uses fewer GPU-seconds.
    lower_gpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def lower_bound_gpu_hours(self) -> float:
        """GPU-hours no policy reaching the attainment target can go below."""
        return sum(self.lower_gpu_seconds.values()) / 3600.0


def oracle(workload: Workload, window_s: float = 60.0, rounds: int = 3,
           progress: Callable[[], None] | None = None, target: float = 0.99
           ) -> OracleResult:
    """The perfect-foresight schedule and its replay, with the lower bound for attainment
    ``target`` beside it (see the module docstring)."""
    need = {t.name: per_window_need(workload, t, window_s, progress) for t in workload.tenants}
    run = None
    used = 0
    for i in range(1, rounds + 1):
        used = i
        pols = {t.name: Schedule(need[t.name], window_s, t.model.cold_start_s)
                for t in workload.tenants}
        init = {t.name: pols[t.name].want(0.0) for t in workload.tenants}
        run = simulate(workload, pols, label="oracle", initial=init)
        bumped = False
        for t in workload.tenants:
            for i, ws in enumerate(run.tenants[t.name].windows):
                if ws.finished and not ws.good and i < len(need[t.name]) and \
                        need[t.name][i] < t.max_replicas:
                    need[t.name][i] += 1
                    bumped = True
        if not bumped:
            break
    assert run is not None
    low = lower_bound(workload, window_s, target)
    return OracleResult(need, run, used, {n: b.need for n, b in low.items()},
                        {n: b.gpu_seconds for n, b in low.items()})


def smallest_static(workload: Workload, need: dict[str, list[int]], target: float,
                    window_s: float = 60.0, below: int = 3
                    ) -> tuple[dict[str, int], RunResult, list[tuple[dict[str, int], RunResult]]]:
    """Fewest fixed replicas per tenant reaching ``target`` attainment (from the peak need
    down while the target holds; up while it does not), and every static run made,
    including ``below`` smaller clusters (one replica fewer per tenant each) for
    comparisons at lower attainment."""
    n = {t: max(v) for t, v in need.items()}
    caps = {t.name: t.max_replicas for t in workload.tenants}

    trials: list[tuple[dict[str, int], RunResult]] = []

    def run(nn: dict[str, int]) -> RunResult:
        r = simulate(workload, {k: Static(v) for k, v in nn.items()}, label="static",
                     initial=nn)
        trials.append((dict(nn), r))
        return r

    best = run(n)
    # Up first where the peak is not enough, then down per tenant while it still holds.
    for _ in range(8):
        low = [k for k, tr in best.tenants.items() if tr.attainment < target and n[k] < caps[k]]
        if not low:
            break
        n = {k: v + (1 if k in low else 0) for k, v in n.items()}
        best = run(n)
    for k in list(n):
        while n[k] > 1:
            trial = dict(n)
            trial[k] -= 1
            r = run(trial)
            if r.tenants[k].attainment >= min(target, best.tenants[k].attainment):
                n, best = trial, r
            else:
                break
    smaller = dict(n)
    for _ in range(below):
        if all(v <= 1 for v in smaller.values()):
            break
        smaller = {k: max(1, v - 1) for k, v in smaller.items()}
        run(smaller)
    return n, best, trials


def with_objectives(workload: Workload, objectives: dict[str, object]) -> Workload:
    """The workload with each tenant's objectives replaced."""
    return replace(workload, tenants=tuple(
        replace(t, objectives=objectives.get(t.name, t.objectives))  # type: ignore[arg-type]
        for t in workload.tenants))


# --- a lower bound on GPU-hours ----------------------------------------------------------
# The percentiles run.window_stats judges a window by.
E2E_QUANTILE = 0.99
ITL_QUANTILE = 0.99


@dataclass(frozen=True)
class TokenCosts:
    """Replica-milliseconds no step can spend less than, per token: ``prompt_ms`` per
    prompt token prefilled, ``decode_ms`` per generated token in a step that meets the
    inter-token objective (0 in one that does not), ``kv_ms`` per cached context token a
    decoding sequence reads. ``max_batch`` is the largest decode batch whose step can meet
    the inter-token objective."""

    prompt_ms: float
    decode_ms: float
    kv_ms: float
    max_batch: int


def _lower_hull(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lower convex hull of points sorted by x (Andrew's monotone chain)."""
    hull: list[tuple[float, float]] = []
    for p in points:
        while len(hull) >= 2 and (hull[-1][0] - hull[-2][0]) * (p[1] - hull[-2][1]) - \
                (hull[-1][1] - hull[-2][1]) * (p[0] - hull[-2][0]) <= 0:
            hull.pop()
        hull.append(p)
    return hull


def token_costs(model: StepModel, itl_ms: float, max_num_seqs: int, budget: int,
                prompt_tokens: float, decode_tokens: float, budget_settable: bool = False
                ) -> TokenCosts:
    """Per-token costs that every step of ``model`` pays at least, chosen to bound a load
    of ``prompt_tokens`` and ``decode_tokens`` as high as possible. A step carries at most
    ``budget`` tokens, unless a policy may set the budget (``budget_settable``): then any
    number, and v stays under the prefill curve's slope beyond its last measured point.

    A step of ``b`` decoding sequences (context ``C`` in all) and ``p`` prompt tokens costs
    at least ``delta(b) + g(p) + kv x C`` (``StepModel.step_ms``; its floors and the
    prefill attention term only add): ``delta(b)`` = the decode curve at ``b`` minus its
    KV read, ``delta(0)`` = the weight read a prefill-only step pays, ``g(p)`` =
    ``prefill_ms(p)`` beyond the weight read. Any (u, v) with ``u b + v p <= delta(b) +
    g(p)`` for every step that meets the inter-token objective, and ``v p <= delta(b) +
    g(p)`` for every other step, charges no step more than it costs, so summed over any
    schedule it bounds the replica time from below. For a given v the largest u is
    ``min_b (delta(b) - G(v)) / b`` with ``G(v) = max_p (v p - g(p))`` (over the lower
    convex hull of g); v is chosen (ternary search, the objective is concave in v) to
    maximise ``u x decode_tokens + v x prompt_tokens``."""
    w = model.weights_ms
    k = model.kv_ms_per_token
    table = model.decode_table
    top = min(max_num_seqs, len(table) - 1)
    delta = [w] + [table[b] - k * b * model.ref_ctx for b in range(1, top + 1)]
    # The shortest step b sequences can take: one cached token each.
    ok = [b for b in range(1, top + 1) if max(w, delta[b] + k * b) <= itl_ms]
    top_p = budget
    if budget_settable:
        # Past its last measured point the prefill curve is a line: the hull to twice that
        # point and a cap on v at the line's slope cover every larger chunk.
        top_p = max(budget, 2 * int(max(model.prefill_tokens, default=1.0)))
    hull = _lower_hull([(float(p), max(0.0, model.prefill_ms(p) - w) if p else 0.0)
                        for p in range(top_p + 1)])
    floor_any = min(delta)

    def conj(v: float) -> float:
        return max(v * p - g for p, g in hull)

    def u_of(v: float) -> float:
        if not ok:
            return 0.0
        g = conj(v)
        return max(0.0, min((delta[b] - g) / b for b in ok))

    v_hi = max(0.0, min(((floor_any + g) / p for p, g in hull if p > 0), default=0.0))
    if budget_settable:
        v_hi = min(v_hi, model.prefill_ms(top_p) - model.prefill_ms(top_p - 1))
    lo, hi = 0.0, v_hi
    for _ in range(100):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if m1 * prompt_tokens + u_of(m1) * decode_tokens < \
                m2 * prompt_tokens + u_of(m2) * decode_tokens:
            lo = m1
        else:
            hi = m2
    v = min((0.0, lo, v_hi), key=lambda x: -(x * prompt_tokens + u_of(x) * decode_tokens))
    return TokenCosts(v, u_of(v), k, max(ok, default=0))


@dataclass(frozen=True)
class TenantBound:
    need: list[int]  # per window
    gpu_seconds: float


# Sub-window intervals start and end on this grid (arrivals are binned to it, rounding
# their deadlines up): a coarser grid only lowers the bound.
GRID_S = 1.0


def _window_excess(bins: Sequence[float], free: float, floor: float, e2e_s: float
                   ) -> tuple[float, float]:
    """(most replica-ms above ``floor`` replicas that disjoint sub-intervals of one window
    force, highest replicas any sub-interval needs on average). ``bins[s]``: the work of
    the requests arriving in grid cell s; an interval [i, j) must hold the work of those
    whose deadline falls inside it, less ``free``."""
    n = len(bins)
    pre = [0.0]
    for b in bins:
        pre.append(pre[-1] + b)
    reach = math.ceil(e2e_s / GRID_S) + 1  # cells from an arrival cell to its deadline
    best = [0.0] * (n + 1)
    peak = 0.0
    for j in range(1, n + 1):
        best[j] = best[j - 1]
        last = j - reach  # latest arrival cell whose deadline is before the grid point j
        for i in range(0, last + 1):
            held = pre[last + 1] - pre[i] - free
            if held <= 0:
                continue
            span = (j - i) * GRID_S * 1e3
            peak = max(peak, held / span)
            best[j] = max(best[j], best[i] + held - floor * span)
    return best[n], peak


def tenant_lower_bound(requests: Sequence[Request], tenant: Tenant, end: float,
                       window_s: float = 60.0, target: float = 0.99) -> TenantBound:
    """The lower bound of the module's ``lower_bound`` for one tenant's requests."""
    obj = tenant.objectives
    e2e_s = obj.e2e_ms / 1e3
    n_win = max(1, math.ceil(end / window_s))
    spans = [min(end, (w + 1) * window_s) - w * window_s for w in range(n_win)]
    prompts = [max(0, r.prompt - r.prefix) for r in requests]
    decodes = [max(0, r.output - 1) for r in requests]
    costs = token_costs(tenant.replica_model, obj.itl_p99_ms, tenant.max_num_seqs,
                        tenant.max_num_batched_tokens, float(sum(prompts)),
                        float(sum(decodes)), tenant.budget_settable)
    k = costs.kv_ms
    work: list[list[float]] = [[] for _ in range(n_win)]  # forced requests' work
    cells = [[0.0] * max(1, math.ceil(spans[w] / GRID_S)) for w in range(n_win)]
    arrivals = [0] * n_win
    tokens = [0] * n_win
    widest = [0] * n_win  # the largest context a window's sequence reaches
    for r, p, d in zip(requests, prompts, decodes, strict=True):
        w = min(n_win - 1, int(r.t // window_s))
        arrivals[w] += 1
        tokens[w] += d
        widest[w] = max(widest[w], r.prompt + r.output)
        if r.t + e2e_s > end:
            continue  # may finish after the trace, where no window judges it
        ms = costs.prompt_ms * p + costs.decode_ms * d + k * (d * r.prompt + d * (d - 1) / 2)
        work[w].append(ms)
        c = cells[w]
        c[min(len(c) - 1, int((r.t - w * window_s) // GRID_S))] += ms
    total = [0.0] * n_win
    above = [0.0] * n_win
    need = [tenant.min_replicas] * n_win
    for w in range(n_win):
        prev = w - 1 if w else w
        late = math.floor((1 - E2E_QUANTILE) * (arrivals[prev] + arrivals[w])) + 1
        slow = math.floor((1 - ITL_QUANTILE) * (tokens[prev] + tokens[w])) + 1
        free = sum(heapq.nlargest(late, work[w])) + slow * (costs.decode_ms + k * widest[w])
        total[w] = max(0.0, sum(work[w]) - free)
        above[w], peak = _window_excess(cells[w], free, tenant.min_replicas, e2e_s)
        need[w] = min(tenant.max_replicas,
                      max(tenant.min_replicas, math.ceil(peak - 1e-9)))
    # Windows the attainment target lets fail, each freeing its own arrivals and the
    # previous window's: at most the largest such pairs (or single windows, twice as many).
    drops = math.floor((1 - target) * n_win)

    def freed(x: list[float]) -> float:
        if drops <= 0:
            return 0.0
        pairs = [x[w] + (x[w - 1] if w else 0.0) for w in range(n_win)]
        return min(sum(heapq.nlargest(drops, pairs)), sum(heapq.nlargest(2 * drops, x)))

    by_window = tenant.min_replicas * sum(spans) * 1e3 + sum(above) - freed(above)
    by_work = sum(total) - freed(total)
    return TenantBound(need, max(by_window, by_work) / 1e3)


def lower_bound(workload: Workload, window_s: float = 60.0, target: float = 0.99
                ) -> dict[str, TenantBound]:
    """Per tenant: the fewest replicas each window's own requests need, and a lower bound
    on the GPU-seconds of any policy meeting ``target`` attainment (see the module
    docstring)."""
    end = workload.trace.duration
    return {t.name: tenant_lower_bound([r for r in workload.trace.requests
                                        if r.tenant == t.name], t, end, window_s, target)
            for t in workload.tenants}
