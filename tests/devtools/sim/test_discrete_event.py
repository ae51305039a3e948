"""The simulator against closed forms: one replica, M/D/1 queueing, the profile's curve."""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import replace
from importlib import resources

import pytest

from slo_devtools.sim.discrete_event import Phase, Service, Simulation
from slo_devtools.sim.traces import Request
from slo_runtime.stepmodel import StepModel

PROFILE = json.loads((resources.files("slo_operator") / "data" / "profiles"
                      / "h200-llama-3.1-8b-ctx1024.json").read_text())
MODEL = StepModel.from_profile(PROFILE, "bf16")


def serve(reqs: list[Request], model: StepModel = MODEL, **kw: object) -> Service:
    sim = Simulation()
    svc = Service(sim, "t", model, **kw)  # type: ignore[arg-type]
    sim.run(reqs, lambda r: svc, until=max(r.t for r in reqs) + 3600)
    return svc


def alone_e2e(prompt: int, output: int, model: StepModel = MODEL) -> tuple[float, float]:
    """(TTFT, e2e) of one request on an idle replica, step by step from the step model."""
    ttft = model.step_ms(0, None, prompt) / 1e3
    e2e = ttft
    for i in range(output - 1):
        # The sequence holds its prompt plus the tokens generated so far.
        e2e += model.step_ms(1, prompt + 1 + i, 0) / 1e3
    return ttft, e2e


@pytest.mark.parametrize(("prompt", "output"), [(512, 1), (1000, 50), (2000, 300)])
def test_one_replica_constant_arrivals_match_the_step_model(prompt: int, output: int) -> None:
    ttft, e2e = alone_e2e(prompt, output)
    gap = e2e + 1.0  # requests never overlap
    svc = serve([Request(i * gap, prompt, output) for i in range(20)])
    assert len(svc.finished) == 20
    for f in svc.finished:
        assert f.first - f.t == pytest.approx(ttft, rel=1e-9)
        assert f.done - f.t == pytest.approx(e2e, rel=1e-9)
    assert svc.gen_tokens == 20 * output
    assert svc.prompt_tokens == 20 * prompt


def test_long_prompt_is_chunked_under_the_token_budget() -> None:
    prompt, budget = 5000, 2048
    svc = serve([Request(0.0, prompt, 1)], max_num_batched_tokens=budget)
    chunks = [budget, budget, prompt - 2 * budget]
    # Each chunk attends to the chunks before it, already in the KV cache.
    want = sum(MODEL.step_ms(0, None, c, prefill_context=i * budget)
               for i, c in enumerate(chunks)) / 1e3
    assert svc.finished[0].first == pytest.approx(want, rel=1e-9)


def test_chunked_prefill_sets_inter_token_latency_not_replica_count() -> None:
    # A decoding sequence shares each step with a prompt chunk: its slowest token takes
    # the budget's step, whatever else happens.
    budget = 1024
    reqs = [Request(0.0, 100, 400)] + [Request(0.05 + 0.2 * i, 3000, 1) for i in range(10)]
    svc = serve(reqs, max_num_batched_tokens=budget)
    worst_bin = max(i for b in svc.itl_bins.values() for i, c in enumerate(b) if c)
    worst = (worst_bin + 1) * 0.0005
    # The longest step: a full chunk late in a 3000-token prompt (its earlier chunks cached).
    bound = MODEL.max_step_ms(budget, 1, 100 + 400, prefill_context=3000) / 1e3
    assert worst <= bound + 0.0005
    assert worst >= MODEL.step_ms(1, 100, budget - 1) / 1e3 - 0.0005


def test_md1_mean_queueing_wait() -> None:
    # Live limit 1: one request at a time, deterministic service D, Poisson arrivals:
    # M/D/1, mean wait in queue W = rho D / (2 (1 - rho)).
    prompt, output = 256, 4
    _, d = alone_e2e(prompt, output)
    rho = 0.7
    lam = rho / d
    rng = random.Random(7)
    t, reqs = 0.0, []
    for _ in range(40000):
        t += rng.expovariate(lam)
        reqs.append(Request(t, prompt, output))
    svc = serve(reqs, limit=1)
    ttft_alone, _ = alone_e2e(prompt, output)
    waits = [f.first - f.t - ttft_alone for f in svc.finished]
    assert min(waits) >= -1e-9
    want = rho * d / (2 * (1 - rho))
    assert statistics.fmean(waits) == pytest.approx(want, rel=0.08)


@pytest.mark.parametrize("batch", [1, 8, 64, 128])
def test_decode_step_curve_reads_back_from_the_profile(batch: int) -> None:
    # `batch` sequences with the profile's context decode together; their time per output
    # token is the profile's measured decode step (context grows by a few tokens only).
    ctx = int(PROFILE["ctx"])
    output = 9
    # A cold replica: the requests wait together for its first step, as in vLLM's queue.
    reqs = [Request(0.0, ctx, output) for _ in range(batch)]
    svc = serve(reqs, max_num_batched_tokens=batch * ctx + 1, warm=False)
    tpot = [(f.done - f.first) / (output - 1) for f in svc.finished]
    measured = PROFILE["decode_ms"]["bf16"][str(batch)] / 1e3
    assert len(tpot) == batch
    assert statistics.fmean(tpot) == pytest.approx(measured, rel=0.02)


def test_kv_capacity_preempts_and_every_request_still_completes() -> None:
    small = replace(MODEL, kv_capacity_tokens=4000)
    reqs = [Request(0.0, 1000, 600) for _ in range(4)]
    svc = serve(reqs, small)
    assert svc.preemptions > 0
    assert len(svc.finished) == 4
    assert svc.gen_tokens == 4 * 600  # recompute keeps generated tokens
    assert any(f.preemptions for f in svc.finished)


def test_cold_start_and_gpu_seconds() -> None:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=1)
    svc.set_replicas(2, 0.0)
    new = [r for r in svc.replicas if r.phase is Phase.STARTING]
    assert len(new) == 1
    sim.run([], lambda r: svc, until=100.0)
    assert new[0].phase is Phase.READY
    assert new[0].ready_at == pytest.approx(MODEL.cold_start_s)
    assert svc.gpu_seconds(100.0) == pytest.approx(200.0)
    svc.set_replicas(1, 100.0)  # idle replica: drained at once
    sim.run([], lambda r: svc, until=200.0)
    assert svc.gpu_seconds(200.0) == pytest.approx(300.0)
    assert svc.scale_actions == 2


def test_live_limit_caps_running_and_queues_the_rest_in_the_gateway() -> None:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=1, limit=4)
    reqs = [Request(0.0, 100, 2000) for _ in range(10)]
    sim.run(reqs, lambda r: svc, until=1.0)
    rep = svc.replicas[0]
    assert rep.running == 4
    assert len(rep.waiting) == 6
    assert svc.gauges()[0] == 0  # vllm:num_requests_waiting does not see the gateway queue
    assert svc.gauges()[1] == 6


def test_central_queue_hands_requests_to_free_replicas_only() -> None:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=2, limit=2, routing="central")
    reqs = [Request(0.0, 100, 3000) for _ in range(7)]
    sim.run(reqs, lambda r: svc, until=1.0)
    assert [r.outstanding for r in svc.replicas] == [2, 2]
    assert len(svc.central) == 3
    sim.run([], lambda r: svc, until=3600.0)
    assert len(svc.finished) == 7
    assert math.isclose(sum(f.output for f in svc.finished), 7 * 3000)


def test_long_prompt_chunks_pay_attention_to_the_earlier_chunks() -> None:
    # With an attention coefficient, each chunk attends to the chunks before it.
    model = replace(MODEL, prefill_attn_ms_per_token2=1e-5)
    prompt, budget = 5000, 2048
    svc = serve([Request(0.0, prompt, 1)], model, max_num_batched_tokens=budget)
    chunks = [(budget, 0), (budget, budget), (prompt - 2 * budget, 2 * budget)]
    want = sum(model.step_ms(0, None, c, prefill_context=before) for c, before in chunks) / 1e3
    assert svc.finished[0].first == pytest.approx(want, rel=1e-9)
    assert want > sum(MODEL.step_ms(0, None, c) for c, _ in chunks) / 1e3


def test_a_later_turn_prefills_only_what_the_prefix_cache_lacks() -> None:
    model = replace(MODEL, prefill_attn_ms_per_token2=1e-5)
    first = Request(0.0, 5000, 10, session=7)
    prefix = 5000 + 10
    later = Request(30.0, prefix + 300, 5, session=7, prefix=prefix)
    svc = serve([first, later], model)
    hit = prefix // 16 * 16  # whole KV blocks
    ttft = svc.finished[1].first - svc.finished[1].t
    assert ttft == pytest.approx(
        model.step_ms(0, None, later.prompt - hit, prefill_context=hit) / 1e3, rel=1e-9)
    assert svc.prefix_queries == first.prompt + later.prompt
    assert svc.prefix_hits == hit


def test_prefix_cache_evicts_the_least_recently_finished_conversation() -> None:
    small = replace(MODEL, kv_capacity_tokens=20000)
    reqs = [Request(0.0, 8000, 2, session=1), Request(1.0, 8000, 2, session=2),
            Request(2.0, 10000, 2),  # needs room: conversation 1 (older) is evicted
            Request(3.0, 8100, 2, session=1, prefix=8002),
            Request(4.0, 8100, 2, session=2, prefix=8002)]
    svc = serve(reqs, small)
    assert len(svc.finished) == 5
    assert svc.prefix_hits == 8002 // 16 * 16  # conversation 2 only


def _busy_holder(prefix_routing: bool) -> Service:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=2, prefix_routing=prefix_routing)
    long = [Request(t, 100, 5000) for t in (0.001, 1.0, 1.001)]
    reqs = sorted([Request(0.0, 1000, 5, session=1), *long,
                   Request(5.0, 1300, 5, session=1, prefix=1005)], key=lambda r: r.t)
    sim.run(reqs, lambda r: svc, until=6.0)
    return svc


def test_prefix_routing_sends_a_later_turn_to_the_replica_holding_its_prefix() -> None:
    # The holder runs two long requests, the other replica one: least-outstanding routing
    # would miss the prefix, prefix-aware routing finds it while the holder admits at once.
    assert _busy_holder(True).prefix_hits == 1005 // 16 * 16
    assert _busy_holder(False).prefix_hits == 0


def test_budget_change_is_a_rolling_update_of_a_quarter_of_the_replicas_at_a_time() -> None:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=8, max_num_batched_tokens=8192)
    svc.set_budget(1024, 0.0)
    assert len(svc.active()) == 8 and len(svc.replicas) == 10  # two successors starting
    assert all(r.budget == 8192 for r in svc.ready())  # the old pods serve meanwhile
    until = 5 * MODEL.cold_start_s
    sim.run([], lambda r: svc, until=until)
    assert [r.budget for r in svc.replicas] == [1024] * 8
    assert all(r.phase is Phase.READY for r in svc.replicas)
    # Each successor started as one before it was ready: four waves of two.
    assert sorted(r.created for r in svc.replicas) == pytest.approx(
        [k * MODEL.cold_start_s for k in (0, 0, 1, 1, 2, 2, 3, 3)])
    # Old pods ran until their successors were ready (idle: retired at once): one cold
    # start of overlap each, as one at a time would cost.
    assert svc.gpu_seconds(until) == pytest.approx(8 * until + 8 * MODEL.cold_start_s)
    assert svc.budget_changes == 1


def test_scale_down_during_a_rollout_takes_a_successor_and_its_predecessor() -> None:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=2, max_num_batched_tokens=8192)
    svc.set_budget(1024, 0.0)
    svc.set_replicas(1, 1.0)
    sim.run([], lambda r: svc, until=100.0)
    assert [r.budget for r in svc.replicas] == [1024]


def test_a_budget_chosen_at_start_needs_no_rollout() -> None:
    sim = Simulation()
    svc = Service(sim, "t", MODEL, replicas=2, max_num_batched_tokens=8192)
    svc.start_budget(1024)
    assert [r.budget for r in svc.replicas] == [1024, 1024]
    assert svc.budget_changes == 0
