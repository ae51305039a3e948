"""The jitter lever through the simulator: the operator lowers the chunked-prefill budget
when the jitter it reads is over the policy's bound, at most once per miss interval, never
below the least chunk, and the replicas' jitter falls (docs/slo-loop.md, "The jitter
lever")."""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import replace

from slo_devtools.sim.bench import TARGETS, step_model
from slo_devtools.sim.policies import SloOperator, policy_spec
from slo_devtools.sim.run import RunResult, Tenant, Workload, simulate
from slo_devtools.sim.traces import Request, Trace
from slo_operator.control.capacity import MIN_CHUNK
from slo_operator.reconcile.chunking import MISS_INTERVAL_S

# Long prompts (log-normal around 4,000 tokens) and short answers (around 20 tokens) at
# 4 req/s for 15 minutes: most streams meet a prefill chunk or two in their few steps.
OBJ = replace(TARGETS["loose"]["long"], jitter_max=0.3)
SPAN_S = 900.0


def _trace() -> Trace:
    rng, reqs, t = random.Random(3), [], 0.0
    while t < SPAN_S:
        t += rng.expovariate(4.0)
        reqs.append(Request(t, int(rng.lognormvariate(8.3, 0.6)),
                            int(rng.lognormvariate(3.0, 1.0)) + 1, "s"))
    return Trace("long-prompts-short-answers", tuple(reqs), SPAN_S)


def _run(lever: bool) -> tuple[RunResult, list[tuple[float, int]]]:
    op = SloOperator(policy_spec(OBJ, 8), jitter_lever=lever)
    tenant = Tenant("s", step_model(), OBJ, max_replicas=8, budget_settable=True)
    run = simulate(Workload("w", _trace(), (tenant,)), {"s": op}, initial={"s": 3})
    moves = [(at, int(msg.split(" -> ")[1].split()[0]))
             for at, reason, msg in op.reasons if reason == "ChunkBudgetChanged"]
    return run, moves


def _median_jitter(run: RunResult, since: float) -> float:
    return statistics.median(w.jitter for w in run.tenants["s"].windows
                             if w.jitter is not None and w.start >= since)


def test_jitter_over_its_bound_lowers_the_budget_step_by_step_and_the_spread_falls() -> None:
    off, off_moves = _run(lever=False)
    on, on_moves = _run(lever=True)
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
