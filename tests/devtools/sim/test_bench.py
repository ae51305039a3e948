"""Workloads, fleets and the runs a report computes."""

from __future__ import annotations

import pytest

from slo_devtools.sim.bench import (
    FLEETS,
    MISMATCHED,
    PINNED_BUDGET,
    TARGETS,
    TRACES,
    VLLM_H200_BUDGET,
    fleet_model,
    runs,
    step_model,
    workload,
)


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_step_time_fleets_scale_every_step_and_keep_the_cold_start(factor: float) -> None:
    seed = step_model()
    true = fleet_model(seed, f"x{factor}")
    for b, ctx, p in [(1, None, 0), (64, 64 * 3000, 0), (0, None, 2048), (32, 32 * 1024, 1000)]:
        assert true.step_ms(b, ctx, p) == pytest.approx(factor * seed.step_ms(b, ctx, p))
    assert true.cold_start_s == seed.cold_start_s
    assert true.kv_capacity_tokens == seed.kv_capacity_tokens


def test_context_cost_fleet_pays_every_kv_read_twice() -> None:
    seed = step_model()
    true = fleet_model(seed, "ctx-x2")
    for b, ctx in [(1, 500), (16, 16 * 1024), (128, 128 * 9000)]:
        # The KV read of every context token, at the profile's cost, once more.
        assert true.decode_ms(b, ctx) - seed.decode_ms(b, ctx) == pytest.approx(
            seed.kv_ms_per_token * ctx)
    assert true.prefill_ms(2048) == seed.prefill_ms(2048)


def test_workloads_hand_policies_the_profile_and_replicas_the_fleet() -> None:
    wl = workload("ramp", "strict", fleet="x1.3")
    t = wl.tenants[0]
    assert t.model == step_model()
    assert t.replica_model.decode_ms(8) == pytest.approx(1.3 * t.model.decode_ms(8))
    assert workload("ramp", "strict").tenants[0].true_model is None
    with pytest.raises(ValueError, match="fleet"):
        workload("ramp", "strict", fleet="x2")


def test_policies_may_choose_the_budget_on_every_workload_from_its_starting_budget() -> None:
    tight = workload("tight-itl", "strict").tenants[0]
    assert tight.budget_settable and tight.max_num_batched_tokens == VLLM_H200_BUDGET
    assert tight.objectives.itl_p99_ms == TARGETS["strict"]["tight"].itl_p99_ms
    for key in ("ramp", "long-context", "azure-code,azure-conv"):
        for t in workload(key, "strict").tenants:
            assert t.budget_settable and t.max_num_batched_tokens == PINNED_BUDGET


def test_default_runs_put_mismatched_fleets_on_strict_targets_only() -> None:
    got = runs()
    assert len(got) == len(TRACES) * len(TARGETS) + len(TRACES) * len(MISMATCHED)
    assert {s for _, s, f in got if f != "x1.0"} == {"strict"}
    assert runs(["ramp"], ["loose"]) == [("ramp", "loose", "x1.0")]
    assert runs(["ramp"], ["loose"], fleets=list(FLEETS)) == [
        ("ramp", "loose", f) for f in FLEETS]


@pytest.mark.parametrize(("args", "option"), [
    ((["azure-chat"], ["strict"], None), "--trace"),
    ((["ramp"], ["tight"], None), "--targets"),
    ((["ramp"], ["strict"], ["x2"]), "--fleet"),
])
def test_unknown_names_say_which_option(args: tuple, option: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=option):
        runs(*args)
