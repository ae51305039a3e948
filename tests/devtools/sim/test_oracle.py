"""The oracle on a load step (more replicas only for the busy minute, started ahead) and
the lower bound beside it."""

from __future__ import annotations

import inspect

import pytest

from slo_devtools.sim.bench import ATTAINMENT_TARGET, TARGETS, step_model
from slo_devtools.sim.oracle import lower_bound, oracle, smallest_static, token_costs
from slo_devtools.sim.policies import Objectives
from slo_devtools.sim.run import Tenant, Workload
from slo_devtools.sim.traces import Request, Trace, azure


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


def azure_slice(rate_scale: float, minutes: int = 5) -> Workload:
    """Minutes 10-15 of the Azure conversation hour (a shipped trace), as one chat tenant."""
    src = azure("azure-conv", rate_scale=rate_scale, seed=0)
    a, b = 600.0, 600.0 + 60.0 * minutes
    reqs = tuple(Request(r.t - a, r.prompt, r.output, "chat") for r in src.requests
                 if a <= r.t < b)
    return Workload("slice", Trace("slice", reqs, b - a),
                    (Tenant("chat", step_model(), TARGETS["strict"]["chat"], max_replicas=16),))


def test_lower_bound_is_below_the_oracle_and_static_on_a_shipped_trace() -> None:
    wl = azure_slice(6.0)
    res = oracle(wl)
    _, static, _ = smallest_static(wl, res.need, 0.99)
    assert 0 < res.lower_bound_gpu_hours <= res.run.gpu_hours
    assert res.lower_bound_gpu_hours <= static.gpu_hours
    # Per window too: the oracle's count never goes below the bound's.
    assert all(lo <= n for lo, n in zip(res.lower_need["chat"], res.need["chat"], strict=True))
    assert max(res.lower_need["chat"]) > 1  # the bound sees the load, not only the floor


def test_lower_bound_grows_with_load_and_is_positive() -> None:
    low = lower_bound(azure_slice(6.0))["chat"].gpu_seconds
    high = lower_bound(azure_slice(12.0))["chat"].gpu_seconds
    assert 0 < low < high
    one = Workload("one", Trace("one", (Request(1.0, 100, 10, "chat"),), 60.0),
                   (Tenant("chat", step_model(), TARGETS["strict"]["chat"]),))
    assert lower_bound(one)["chat"].gpu_seconds > 0


def test_lower_bound_is_below_the_oracle_on_a_load_step() -> None:
    res = oracle(step_load())
    assert 0 < res.lower_bound_gpu_hours <= res.run.gpu_hours
    assert all(lo <= n for lo, n in zip(res.lower_need["chat"], res.need["chat"], strict=True))


@pytest.mark.parametrize(("itl_ms", "prompt", "decode", "settable"), [
    pytest.param(75.0, 1000.0, 250.0, False, id="chat-mix"),
    pytest.param(75.0, 0.0, 250.0, False, id="decode-only"),
    pytest.param(75.0, 1000.0, 0.0, False, id="prefill-only"),
    pytest.param(8.0, 1000.0, 250.0, False, id="tight-itl-caps-the-batch"),
    pytest.param(75.0, 1000.0, 0.0, True, id="any-chunk-when-the-budget-is-settable"),
])
def test_token_costs_never_charge_a_step_more_than_it_takes(itl_ms: float, prompt: float,
                                                             decode: float,
                                                             settable: bool) -> None:
    m = step_model()
    c = token_costs(m, itl_ms, 256, 2048, prompt, decode, settable)
    assert c.prompt_ms >= 0 and c.decode_ms >= 0 and c.prompt_ms + c.decode_ms > 0
    chunks = (0, 1, 64, 111, 128, 500, 1024, 2048) + ((8192, 20_000, 100_000) if settable else ())
    for b in (0, 1, 2, 7, 32, 95, 128, 200, 256):
        for p in (min(x, 2048 - b) if not settable else x for x in chunks):
            for ctx in (b, b * 300, b * 4000):  # context tokens in all, >= 1 a sequence
                if b == 0 and p == 0:
                    continue
                step = m.step_ms(b, ctx if b else None, p)
                # A step over the inter-token objective earns its decode tokens nothing.
                costed = b if step <= itl_ms else 0
                charged = c.decode_ms * costed + c.prompt_ms * p + c.kv_ms * ctx * (b > 0)
                assert charged <= step + 1e-9, (b, p, ctx)
    if itl_ms < 10:
        assert c.max_batch < 256
        assert m.decode_ms(c.max_batch + 1, c.max_batch + 1) > itl_ms


def test_lower_bound_defaults_to_the_benchmarks_attainment_target() -> None:
    assert inspect.signature(oracle).parameters["target"].default == ATTAINMENT_TARGET
