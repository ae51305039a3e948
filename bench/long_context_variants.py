"""Held-out long-context days: the benchmark's long-context conversations
(``slo_devtools.sim.traces.long_context``) with other seeds, more turns per conversation
and shorter think times (more prefix reuse, longer histories), replayed for slo-operator
and the reference oracle under the long-context strict objectives (docs/slo-loop.md,
"sixth"). Prints, per day and fleet, the operator's attainment after the warm-up, the
windows it missed there (minute: e2e P99 s, first-token P95 s, inter-token P99 ms) and
its GPU-hours against the reference's; then the totals.

    PYTHONPATH=operator:devtools:runtime python3 bench/long_context_variants.py --jobs 2
"""

from __future__ import annotations

import argparse
import itertools
from concurrent.futures import ProcessPoolExecutor

from slo_devtools.sim import bench
from slo_devtools.sim import traces as T
from slo_devtools.sim.oracle import oracle
from slo_devtools.sim.run import WARMUP_S, Tenant, Workload, simulate

TENANT = "long-context"


def day(turns: float, think_s: float, seed: int, fleet: str) -> tuple[str, int, float, float]:
    """(line, windows missed after the warm-up, operator GPU-hours, reference GPU-hours)."""
    trace = T.long_context(rate_scale=bench.LONG_CONTEXT_RATE, seed=seed, tenant=TENANT,
                           mean_turns=turns, think_s=think_s)
    tenant = Tenant(TENANT, bench.step_model(), bench.TARGETS["strict"]["long"],
                          max_replicas=bench.MAX_REPLICAS, budget_settable=True)
    wl = bench.with_fleet(Workload("long-context-variant", trace, (tenant,)), fleet)
    ref = oracle(wl)
    start = {t.name: max(1, ref.need[t.name][0]) for t in wl.tenants}
    operator = bench.candidates()[-1][1]
    run = simulate(wl, {t.name: operator(t) for t in wl.tenants}, initial=start)
    missed = [w for w in run.tenants[TENANT].windows
              if w.finished and not w.good and w.start >= WARMUP_S]
    where = ", ".join(f"{int(w.start // 60)}: {w.e2e_p99 or 0:.1f}/{w.ttft_p95 or 0:.1f}/"
                      f"{1000 * (w.itl_p99 or 0):.0f}" for w in missed)
    line = (f"turns {turns:g}, think {think_s:g} s, seed {seed}, {fleet}: "
            f"{100 * run.min_warm_attainment:.1f}% after the warm-up, "
            f"{run.gpu_hours:.2f} GPU-h (reference {ref.run.gpu_hours:.2f}, "
            f"{run.gpu_hours / ref.run.gpu_hours:.2f}x)" + (f"; missed {where}" if where else ""))
    return line, len(missed), run.gpu_hours, ref.run.gpu_hours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated trace seeds")
    ap.add_argument("--turns", default="2:60,5:30",
                    help="comma-separated MEAN_TURNS:THINK_S conversation settings")
    ap.add_argument("--fleets", default="x1.0,ctx-x2", help="comma-separated fleets")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        turns = [(float(x), float(y)) for x, y in (t.split(":") for t in a.turns.split(","))]
    except ValueError as err:
        ap.error(f"--seeds/--turns: {err}")
    if any(t < 1 or th < 0 for t, th in turns):
        ap.error("--turns: MEAN_TURNS must be >= 1 and THINK_S >= 0")
    fleets = a.fleets.split(",")
    unknown = [f for f in fleets if f not in bench.FLEETS]
    if unknown:
        ap.error(f"--fleets: unknown {', '.join(unknown)}; known: {', '.join(bench.FLEETS)}")
    runs = [(t, th, s, f) for (t, th), s, f in itertools.product(turns, seeds, fleets)]
    missed = 0
    ours = ref = 0.0
    with ProcessPoolExecutor(max(1, a.jobs)) as pool:
        for line, m, g, r in pool.map(day, *zip(*runs, strict=True)):
            print(line, flush=True)
            missed, ours, ref = missed + m, ours + g, ref + r
    days = f"{len(runs)} day" + ("s" if len(runs) != 1 else "")
    print(f"{days}: {missed} windows missed after the warm-up, {ours:.2f} GPU-h "
          f"(reference {ref:.2f}, {ours / ref:.2f}x)")


if __name__ == "__main__":
    main()
