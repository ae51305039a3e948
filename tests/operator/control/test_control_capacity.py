"""The capacity model: seeds from the shared step model, hardware scaling, the SLO batch."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from slo_operator.control.capacity import (
    SEED_STEP_TIMES,
    TAIL_OUTPUT_FACTOR,
    StepTimes,
    hardware_ratios,
    itl_budget_ms,
    rate_at_batch,
    replica_capacity,
    seed_step_times,
)
from slo_runtime.stepmodel import StepModel

PROFILES = {8.0: "h200-llama-3.1-8b-ctx1024.json", 70.0: "h200-llama-3.1-70b-ctx1024.json"}


@pytest.mark.parametrize("key", sorted(SEED_STEP_TIMES), ids=lambda k: f"{k[0]:g}b-{k[1]}")
def test_seed_is_the_shared_step_model_of_the_packaged_profile(key: tuple[float, str]) -> None:
    size, precision = key
    doc = json.loads((resources.files("slo_operator") / "data" / "profiles"
                      / PROFILES[size]).read_text())
    fit = StepTimes.from_step_model(StepModel.from_profile(doc, precision))
    seed = SEED_STEP_TIMES[key]
    assert seed.base_ms == pytest.approx(fit.base_ms, rel=0.01)
    assert seed.per_seq_ms == pytest.approx(fit.per_seq_ms, rel=0.01)
    assert seed.prefill_ms_per_token == pytest.approx(fit.prefill_ms_per_token, rel=0.01)


def test_seed_scales_to_the_gpu_and_model_size() -> None:
    h200 = seed_step_times(8.0, "bf16", "NVIDIA H200")
    h100 = seed_step_times(8.0, "bf16", "H100-SXM5-80GB")
    bandwidth, _ = hardware_ratios("H100-SXM5-80GB")
    assert h100.base_ms == pytest.approx(h200.base_ms / bandwidth)
    assert h100.base_ms > h200.base_ms  # less memory bandwidth: slower decode
    assert seed_step_times(8.0, "bf16", "no-such-gpu") == h200  # unknown: the seed as is
    assert seed_step_times(16.0, "bf16").base_ms == pytest.approx(2 * h200.base_ms)
    assert seed_step_times(8.0, "fp8").base_ms < h200.base_ms
    assert seed_step_times(8.0, "fp16") == h200


def test_tighter_inter_token_target_means_smaller_batch_and_less_per_replica() -> None:
    st = SEED_STEP_TIMES[(8.0, "bf16")]
    loose = replica_capacity(st, prompt_tokens=500, output_tokens=200, itl_budget=20.0,
                             min_batch=1, max_batch=512)
    tight = replica_capacity(st, prompt_tokens=500, output_tokens=200, itl_budget=8.0,
                             min_batch=1, max_batch=512)
    assert loose.feasible and tight.feasible
    assert tight.batch < loose.batch and tight.rate < loose.rate
    assert tight.itl_ms <= 8.0 and loose.itl_ms <= 20.0


def test_unreachable_target_is_flagged_and_sized_for_throughput() -> None:
    st = SEED_STEP_TIMES[(8.0, "bf16")]
    cap = replica_capacity(st, prompt_tokens=500, output_tokens=200, itl_budget=2.0,
                           min_batch=8, max_batch=256)
    assert not cap.feasible and cap.best_itl_ms > 2.0
    assert cap.batch >= 8 and cap.rate > 0


def test_budget_leaves_room_for_first_token_and_long_outputs() -> None:
    # 10 s e2e, 1 s TTFT, 200-token mean output: a 480-token tail request, 80% margin.
    tail = TAIL_OUTPUT_FACTOR * 200 - 1
    assert itl_budget_ms(10_000, 1_000, None, 200) == pytest.approx(0.8 * 9_000 / tail)
    assert itl_budget_ms(10_000, 1_000, 15, 200) == pytest.approx(12.0)


def test_rate_grows_with_batch() -> None:
    st = SEED_STEP_TIMES[(8.0, "bf16")]
    rates = [rate_at_batch(st, b, 500, 200) for b in (1, 8, 64, 256)]
    assert rates == sorted(rates)
