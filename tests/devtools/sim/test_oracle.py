"""The oracle on a load step: more replicas only for the busy minute, started ahead."""

from __future__ import annotations

from slo_devtools.sim.bench import step_model
from slo_devtools.sim.oracle import oracle, smallest_static
from slo_devtools.sim.policies import Objectives
from slo_devtools.sim.run import Tenant, Workload
from slo_devtools.sim.traces import Request, Trace


def step_load() -> Workload:
    reqs = []
    t = 0.0
    while t < 300.0:
        busy = 120.0 <= t < 180.0
        reqs.append(Request(t, 1500, 60, "chat"))
        t += 1 / 60.0 if busy else 1 / 2.0
    obj = Objectives(6000, 500, 100)
    return Workload("step", Trace("step", tuple(reqs), 300.0),
                    (Tenant("chat", step_model(), obj, max_replicas=8),))


def test_oracle_adds_replicas_for_the_busy_minute_only_and_meets_every_window() -> None:
    wl = step_load()
    res = oracle(wl)
    need = res.need["chat"]
    assert need[0] == need[1] == 1
    assert need[2] >= 2
    assert need[3] <= need[2] and need[4] == 1  # the queue of the busy minute drains in 3
    assert res.run.min_attainment == 1.0
    # Started one cold start ahead: ready when the busy minute begins.
    series = res.run.tenants["chat"].series
    ready_at_busy = [r for t, _, r, _ in series if 120.0 <= t < 135.0]
    assert ready_at_busy and min(ready_at_busy) >= need[2]
    n, static, trials = smallest_static(wl, res.need, 0.99)
    assert n["chat"] >= need[2]
    assert res.run.gpu_hours < static.gpu_hours
    assert static in [r for _, r in trials]
    assert any(t["chat"] < n["chat"] for t, _ in trials)  # smaller clusters for comparison
