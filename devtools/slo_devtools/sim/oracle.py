"""A perfect-foresight lower bound, and the smallest static cluster, by simulation.

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
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from slo_devtools.sim.policies import Schedule, Static
from slo_devtools.sim.run import RunResult, Tenant, Workload, build_sim, simulate, window_stats
from slo_devtools.sim.traces import Request, Trace

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


def oracle(workload: Workload, window_s: float = 60.0, rounds: int = 3,
           progress: Callable[[], None] | None = None) -> OracleResult:
    """The perfect-foresight schedule and its replay (see the module docstring)."""
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
    return OracleResult(need, run, used)


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
