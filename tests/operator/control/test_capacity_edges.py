"""Capacity model edges: exact step arithmetic, the linear reduction, seed choice by size."""

from __future__ import annotations

import dataclasses
import math

import pytest

from slo_operator.control.capacity import (
    SEED_PRODUCT,
    SEED_STEP_TIMES,
    StepTimes,
    hardware_ratios,
    itl_budget_ms,
    predicted_tokens_per_s,
    rate_at_batch,
    replica_capacity,
    seed_step_times,
)
from slo_operator.hardware import resolve_product


@dataclasses.dataclass(frozen=True)
class Quadratic:
    """A step model whose decode step is not linear in the batch: the fit depends on the range."""

    weights_ms: float = 10.0

    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float:
        return self.weights_ms + float(batch) ** 2

    def prefill_ms(self, tokens: int) -> float:
        return self.weights_ms + 0.01 * tokens


@dataclasses.dataclass(frozen=True)
class Linear:
    base: float
    slope: float
    weights_ms: float = 0.0

    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float:
        return self.base + self.slope * batch

    def prefill_ms(self, tokens: int) -> float:
        return self.weights_ms + 0.02 * tokens


def test_step_is_base_plus_sequences_plus_prefill_tokens() -> None:
    st = StepTimes(1.0, 2.0, 3.0)
    assert st.step_ms(4) == 9.0  # no prefill chunk unless one is named
    assert st.step_ms(4, 5) == 24.0


def test_a_faster_replica_divides_every_step_time() -> None:
    assert StepTimes(2.0, 4.0, 8.0).scaled(2.0) == StepTimes(1.0, 2.0, 4.0)


def test_step_times_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        StepTimes(1.0, 2.0, 3.0).base_ms = 0.0  # type: ignore[misc]


def test_reduction_is_least_squares_over_batches_one_to_max() -> None:
    # decode 10 + b^2 over b = 1..3: mean b 2, mean step 14.67, slope 4, intercept 6.67.
    fit = StepTimes.from_step_model(Quadratic(), max_batch=3, prefill_tokens=100)
    assert fit.per_seq_ms == pytest.approx(4.0)
    assert fit.base_ms == pytest.approx(10.0 + 14.0 / 3.0 - 8.0)
    assert fit.prefill_ms_per_token == pytest.approx(0.01)  # beyond the weight read
    # A range of one batch is widened to two (b = 1, 2: slope 3, intercept 12.5 - 4.5).
    fit1 = StepTimes.from_step_model(Quadratic(), max_batch=1, prefill_tokens=100)
    assert fit1.per_seq_ms == pytest.approx(3.0)
    assert fit1.base_ms == pytest.approx(8.0)


def test_reduction_keeps_a_small_positive_intercept() -> None:
    fit = StepTimes.from_step_model(Linear(0.5, 2.0), max_batch=8, prefill_tokens=100)
    assert fit.base_ms == pytest.approx(0.5)
    assert fit.per_seq_ms == pytest.approx(2.0)


def test_seed_comes_from_the_nearest_measured_size() -> None:
    assert seed_step_times(70.0, "bf16") == SEED_STEP_TIMES[(70.0, "bf16")]
    assert seed_step_times(8.0, "fp8") == SEED_STEP_TIMES[(8.0, "fp8")]


def test_seed_for_a_model_below_a_billion_parameters_scales_down() -> None:
    base = SEED_STEP_TIMES[(8.0, "bf16")]
    half = seed_step_times(0.5, "bf16")
    assert half.base_ms == pytest.approx(base.base_ms / 16)
    assert half.per_seq_ms == pytest.approx(base.per_seq_ms / 16)
    assert half.prefill_ms_per_token == pytest.approx(base.prefill_ms_per_token / 16)


def test_seed_without_a_usable_model_size_is_the_8b_profile() -> None:
    base = SEED_STEP_TIMES[(8.0, "bf16")]
    assert seed_step_times(None, "bf16") == base
    assert seed_step_times(0.0, "bf16") == base


ST = StepTimes(2.0, 1.0, 0.01)  # step(4) = 6 ms; 500 prompt tokens cost 5 ms of prefill


def test_rate_is_utilisation_over_per_request_time() -> None:
    # 100 tokens at 6 ms shared by 4 sequences: 150 ms, plus 5 ms of prefill.
    assert rate_at_batch(ST, 4, 500, 100) == pytest.approx(0.8 * 1000.0 / 155.0)
    # Batch below one, no prompt, output below one token: clamped to 1, 0 and 1.
    assert rate_at_batch(ST, 0, 500, 100) == pytest.approx(0.8 * 1000.0 / 305.0)
    assert rate_at_batch(ST, 4, -5, 100) == pytest.approx(0.8 * 1000.0 / 150.0)
    assert rate_at_batch(ST, 4, 0, 0.5) == pytest.approx(0.8 * 1000.0 / 1.5)


def test_rate_of_a_free_step_is_unbounded_and_a_short_one_is_finite() -> None:
    assert rate_at_batch(StepTimes(0.0, 0.0, 0.0), 4, 100, 100) == math.inf
    assert rate_at_batch(StepTimes(0.001, 0.0, 0.0), 1, 0, 1) == pytest.approx(0.8 * 1e6)


def test_inter_token_latency_is_the_step_stretched_by_the_prefill_share() -> None:
    cap = replica_capacity(ST, prompt_tokens=500, output_tokens=100, itl_budget=1_000.0,
                           min_batch=4, max_batch=4)
    mu = 1000.0 / 155.0
    share = 0.8 * mu * 500 * 0.01 / 1000.0
    assert cap.batch == 4 and cap.feasible
    assert cap.rate == pytest.approx(0.8 * mu)
    assert cap.itl_ms == pytest.approx(6.0 / (1.0 - share))
    assert cap.best_itl_ms == pytest.approx(6.0 / (1.0 - share))


def test_prefill_share_is_capped_at_ninety_percent() -> None:
    # Fully used, a 1000-token prompt per 1-token output: prefill is 99.9% of the time.
    cap = replica_capacity(StepTimes(1.0, 0.0, 1.0), prompt_tokens=1000, output_tokens=1,
                           itl_budget=1_000.0, min_batch=1, max_batch=1, utilization=1.0)
    assert cap.itl_ms == pytest.approx(1.0 / 0.1)


def test_capacity_without_prompt_and_single_token_outputs() -> None:
    cap = replica_capacity(ST, prompt_tokens=0, output_tokens=1, itl_budget=1_000.0,
                           min_batch=1, max_batch=1)
    assert cap.batch == 1
    assert cap.rate == pytest.approx(0.8 * 1000.0 / 3.0)
    assert cap.itl_ms == pytest.approx(3.0)


def test_a_budget_equal_to_the_best_latency_is_feasible() -> None:
    first = replica_capacity(ST, prompt_tokens=500, output_tokens=100, itl_budget=1_000.0,
                             min_batch=4, max_batch=64)
    exact = replica_capacity(ST, prompt_tokens=500, output_tokens=100,
                             itl_budget=first.best_itl_ms, min_batch=4, max_batch=64)
    assert exact.feasible and exact.batch == 4


@pytest.mark.parametrize(("max_batch", "knee"), [(64, 8), (4, 4)])
def test_infeasible_targets_size_at_the_knee(max_batch: int, knee: int) -> None:
    """Steps of 10 + b ms from batch 2 (12 ms): batch 8 is the last at <= 1.5x (18 ms)."""
    st = StepTimes(10.0, 1.0, 0.0)
    cap = replica_capacity(st, prompt_tokens=0, output_tokens=100, itl_budget=1.0,
                           min_batch=2, max_batch=max_batch)
    assert not cap.feasible and cap.best_itl_ms == pytest.approx(12.0)
    assert cap.batch == knee
    assert cap.rate == pytest.approx(0.8 * 1000.0 / (100 * (10.0 + knee) / knee))
    assert cap.itl_ms == pytest.approx(10.0 + knee)


def test_budget_edges() -> None:
    # A first-token target at or above the e2e target leaves nothing for decoding.
    assert itl_budget_ms(1_000, 2_000, None, 100) == 0.0
    # Very short outputs: the tail request still has at least one token to decode.
    assert itl_budget_ms(10_000, 1_000, None, 0.5) == pytest.approx(0.8 * 9_000)


def test_feasible_batch_is_the_largest_within_budget() -> None:
    """Without prefill the inter-token latency is the step, 10 + b ms: 30 ms allows b = 20."""
    cap = replica_capacity(StepTimes(10.0, 1.0, 0.0), prompt_tokens=0, output_tokens=100,
                           itl_budget=30.0, min_batch=1, max_batch=64)
    assert cap.feasible and cap.batch == 20 and type(cap.batch) is int
    assert cap.itl_ms == pytest.approx(30.0)


def test_capacity_is_immutable() -> None:
    cap = replica_capacity(ST, prompt_tokens=500, output_tokens=100, itl_budget=1_000.0,
                           min_batch=4, max_batch=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cap.batch = 1  # type: ignore[misc]


def test_predicted_tokens_per_second() -> None:
    assert predicted_tokens_per_s(ST, 4) == pytest.approx(1000.0 * 4 / 6.0)
    assert predicted_tokens_per_s(ST, 0) == pytest.approx(1000.0 / 3.0)  # at least one


def _hw(name: str) -> tuple[float, float | None, float | None]:
    hw = resolve_product(name).hardware
    assert hw is not None
    return hw.memory_bandwidth_gbps, hw.dense_bf16_tflops, hw.dense_fp8_tflops


def test_hardware_ratios_take_the_precision_s_compute() -> None:
    bw, bf16, fp8 = _hw("NVIDIA L40S")
    ref_bw, ref_bf16, ref_fp8 = _hw(SEED_PRODUCT)
    assert bf16 and fp8 and ref_bf16 and ref_fp8
    assert hardware_ratios("NVIDIA L40S", "fp8") == pytest.approx((bw / ref_bw, fp8 / ref_fp8))
    assert hardware_ratios("NVIDIA L40S", "bf16") == pytest.approx(
        (bw / ref_bw, bf16 / ref_bf16))
    assert hardware_ratios("NVIDIA L40S") == hardware_ratios("NVIDIA L40S", "bf16")
    # No compute figure in the catalogue: prefill scales with the bandwidth too.
    a10_bw, a10_bf16, _ = _hw("NVIDIA A10G")
    assert a10_bf16 is None
    assert hardware_ratios("NVIDIA A10G") == pytest.approx((a10_bw / ref_bw, a10_bw / ref_bw))


def test_seed_on_another_gpu_divides_decode_by_bandwidth_and_prefill_by_compute() -> None:
    base = SEED_STEP_TIMES[(8.0, "bf16")]
    bandwidth, compute = hardware_ratios("NVIDIA L40S", "bf16")
    seed = seed_step_times(8.0, "bf16", "NVIDIA L40S")
    assert seed.base_ms == pytest.approx(base.base_ms / bandwidth)
    assert seed.per_seq_ms == pytest.approx(base.per_seq_ms / bandwidth)
    assert seed.prefill_ms_per_token == pytest.approx(base.prefill_ms_per_token / compute)
