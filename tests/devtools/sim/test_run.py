"""One run: the true fleet against the profile policies see, warm-up attainment, and the
chunked-prefill budget a policy may choose."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from slo_devtools.sim.bench import step_model
from slo_devtools.sim.policies import Action, Context, Objectives, Static
from slo_devtools.sim.run import WARMUP_S, Tenant, Workload, simulate
from slo_devtools.sim.traces import Request, Trace
from slo_runtime.stepmodel import StepModel

OBJ = Objectives(6000, 500, 100)


def light(n: int = 600, duration: float = 900.0) -> Trace:
    return Trace("light", tuple(Request(i * duration / n, 400, 20, "chat") for i in range(n)),
                 duration)


@dataclass
class Watcher:
    """Static replicas that record the model its context offers."""

    replicas: int = 1
    name: str = "watcher"
    period_s: float = 30.0
    seen: list[StepModel] = field(default_factory=list)

    def act(self, ctx: Context, now: float) -> Action:
        self.seen.append(ctx.model)
        return Action(self.replicas)


def test_replicas_run_the_true_model_while_policies_see_the_profile() -> None:
    seed = step_model()
    slow = seed.sped_up(0.5)
    wl = Workload("w", light(), (Tenant("chat", seed, OBJ, true_model=slow),))
    pol = Watcher()
    run = simulate(wl, {"chat": pol})
    assert pol.seen and all(m is seed for m in pol.seen)
    same = simulate(replace(wl, tenants=(Tenant("chat", seed, OBJ),)), {"chat": Static(1)})
    # Lone short requests: each takes the true model's time, twice the profile's.
    assert run.tenants["chat"].e2e_p99 == pytest.approx(
        2 * (same.tenants["chat"].e2e_p99 or 0), rel=0.02)


def test_attainment_after_warm_up_leaves_out_the_first_windows() -> None:
    # An overload in the first two minutes, light load after: only early windows miss.
    burst = [Request(i * 0.01, 3000, 200, "chat") for i in range(3000)]
    tr = Trace("b", tuple(sorted(burst + list(light().requests), key=lambda r: r.t)), 1800.0)
    wl = Workload("w", tr, (Tenant("chat", step_model(), OBJ),))
    run = simulate(wl, {"chat": Static(1)})
    t = run.tenants["chat"]
    assert t.attainment < 1.0
    assert t.warm_attainment == 1.0 == run.min_warm_attainment
    assert all(w.good for w in t.windows if w.start >= WARMUP_S and w.finished)


@dataclass(frozen=True)
class BudgetAction:
    replicas: int | None = None
    limit: int | None = None
    reason: str = ""
    chunk_budget: int | None = None


@dataclass
class Budgeter:
    budget: int
    start: int | None = None
    name: str = "budgeter"
    period_s: float = 30.0

    def act(self, ctx: Context, now: float) -> BudgetAction:
        return BudgetAction(1, chunk_budget=self.budget)

    def initial_chunk_budget(self, ctx: Context) -> int | None:
        return self.start


def _budget_run(settable: bool, pol: Budgeter) -> tuple[int, int]:
    t = Tenant("chat", step_model(), OBJ, max_num_batched_tokens=8192,
               budget_settable=settable)
    run = simulate(Workload("w", light(100, 300.0), (t,)), {"chat": pol})  # type: ignore[dict-item]
    res = run.tenants["chat"]
    return res.budget, res.budget_changes


def test_a_policy_sets_the_chunk_budget_only_where_the_tenant_allows_it() -> None:
    assert _budget_run(True, Budgeter(1024)) == (1024, 1)  # a rolling update
    assert _budget_run(False, Budgeter(1024)) == (8192, 0)
    # Chosen before the run (the rendered Deployment): no rollout.
    assert _budget_run(True, Budgeter(1024, start=1024)) == (1024, 0)
