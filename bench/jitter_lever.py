"""The jitter lever on and off, side by side: the benchmark's workloads with a jitter bound
(``throughputCVMax``) added to their objectives, so the judge counts it, replayed for
slo-operator with the lever (``reconcile.chunking``: the chunked-prefill budget lowered for
jitter read over the bound) and without it (the budget answers the inter-token objective
alone). Prints, per run, the worst tenant's windows within every objective after the
warm-up, GPU-hours, each tenant's jitter P50 / P90 over those windows, and the budget moves
(docs/slo-loop.md, "The jitter lever").

    PYTHONPATH=operator:devtools:runtime python3 bench/jitter_lever.py --jobs 2
"""

from __future__ import annotations

import argparse
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from slo_devtools.sim import bench
from slo_devtools.sim.oracle import oracle
from slo_devtools.sim.policies import SloOperator, policy_spec
from slo_devtools.sim.run import Workload, simulate

# (workload, target set, fleet, bound): long-context reads 0.19-0.60 and the Azure code
# tenant 0.5-0.65 at the median without a bound (docs/slo-loop.md, "Jitter"); 0.3 is out of
# the lever's reach on long prompts (the least chunk still reads about 0.39).
DEFAULT_RUNS = ("long-context:strict:x1.0:0.5", "long-context:strict:x1.0:0.3",
                "azure-code,azure-conv:strict:x1.0:0.6")


def bounded(key: str, targets: str, fleet: str, bound: float) -> Workload:
    """The benchmark's workload with ``bound`` added to every tenant's objectives."""
    wl = bench.workload(key, targets, 0, fleet)
    tenants = tuple(replace(t, objectives=replace(t.objectives, jitter_max=bound))
                    for t in wl.tenants)
    return replace(wl, tenants=tenants)


def run(args: tuple[str, str, str, float, bool]) -> tuple[float, str, float, str]:
    """(worst tenant's share of windows after the warm-up within every objective, each
    tenant's jitter P50 / P90 over those windows, GPU-hours, budget moves)."""
    key, targets, fleet, bound, lever = args
    wl = bounded(key, targets, fleet, bound)
    start = {t.name: max(1, oracle(wl).need[t.name][0]) for t in wl.tenants}
    ops = {t.name: SloOperator(policy_spec(t.objectives, t.max_replicas), jitter_lever=lever)
           for t in wl.tenants}
    res = simulate(wl, ops, initial=start)
    spread = []
    for name, t in res.tenants.items():
        jit = [w.jitter for w in t.windows if w.jitter is not None and w.start >= t.warmup_s]
        q = statistics.quantiles(jit, n=10) if len(jit) > 1 else [float("nan")] * 9
        spread.append(f"{name} {q[4]:.3f}/{q[8]:.3f}")
    moves = "; ".join(f"{name} {now / 60:.1f} min {msg}" for name, op in ops.items()
                      for now, reason, msg in op.reasons if reason == "ChunkBudgetChanged")
    return res.min_warm_attainment, ", ".join(spread), res.gpu_hours, moves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", metavar="WORKLOAD:TARGETS:FLEET:BOUND",
                    help=f"a run (repeatable; default: {', '.join(DEFAULT_RUNS)})")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    try:
        runs = [(k, t, f, float(b)) for k, t, f, b in
                (r.rsplit(":", 3) for r in (a.run or DEFAULT_RUNS))]
    except ValueError as err:
        ap.error(f"--run: expected WORKLOAD:TARGETS:FLEET:BOUND ({err})")
    for k, t, f, b in runs:
        if k not in bench.TRACES or t not in bench.TARGETS or f not in bench.FLEETS \
                or not 0 < b <= 10:
            ap.error(f"--run {k}:{t}:{f}:{b:g}: workloads {', '.join(bench.TRACES)}; "
                     f"targets {', '.join(bench.TARGETS)}; fleets {', '.join(bench.FLEETS)}; "
                     "bound in (0, 10]")
    jobs = [(k, t, f, b, lever) for k, t, f, b in runs for lever in (False, True)]
    with ProcessPoolExecutor(max(1, a.jobs)) as ex:
        got = list(ex.map(run, jobs))
    for i, (k, t, f, b) in enumerate(runs):
        off, on = got[2 * i], got[2 * i + 1]
        print(f"{k}, {t}, {f}, throughputCVMax {b:g}: windows within every objective "
              f"{100 * off[0]:.1f}% -> {100 * on[0]:.1f}%, GPU-hours {off[2]:.2f} -> "
              f"{on[2]:.2f} ({on[2] / off[2]:.3f}x)\n"
              f"  jitter P50/P90 without the lever: {off[1]}; with it: {on[1]}\n"
              f"  moves without the lever: {off[3] or 'none'}\n"
              f"  moves with the lever: {on[3] or 'none'}")


if __name__ == "__main__":
    main()
