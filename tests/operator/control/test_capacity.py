"""The capacity model: step arithmetic, the linear reduction of the shared step model, seeds
by model size, precision and GPU, the per-token budget and the SLO-feasible batch."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from importlib import resources

import pytest

from slo_operator.control import StepTimes, seed_step_times
from slo_operator.control.capacity import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    SEED_PRODUCT,
    SEED_STEP_TIMES,
    TAIL_OUTPUT_FACTOR,
    chunk_budget_for_itl,
    chunk_step_ms,
    hardware_ratios,
    itl_budget_ms,
    predicted_tokens_per_s,
    rate_at_batch,
    replica_capacity,
)
from slo_operator.hardware import resolve_product
from slo_runtime.stepmodel import StepModel
from tests.support.paths import REPO

PROFILES = {8.0: "h200-llama-3.1-8b-ctx1024.json", 70.0: "h200-llama-3.1-70b-ctx1024.json"}
SEED_8B = SEED_STEP_TIMES[(8.0, "bf16")]
ST = StepTimes(2.0, 1.0, 0.01)  # step(4) = 6 ms; 500 prompt tokens cost 5 ms of prefill


def one_line(text: str) -> str:
    return " ".join(text.split())


@dataclasses.dataclass(frozen=True)
class Quadratic:
    """Decode 10 + b^2 and prefill 10 + t^2 / 1000 ms: both fits depend on their range."""

    weights_ms: float = 10.0
    prefill_per_token: float | None = None  # linear prefill (ms per token) instead

    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float:
        return self.weights_ms + float(batch) ** 2

    def prefill_ms(self, tokens: int) -> float:
        if self.prefill_per_token is not None:
            return self.weights_ms + self.prefill_per_token * tokens
        return self.weights_ms + tokens**2 / 1000.0


@dataclasses.dataclass(frozen=True)
class Linear:
    base: float
    slope: float
    weights_ms: float = 0.0

    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float:
        return self.base + self.slope * batch

    def prefill_ms(self, tokens: int) -> float:
        return self.weights_ms + 0.02 * tokens


def hw(name: str) -> tuple[float, float | None, float | None]:
    h = resolve_product(name).hardware
    assert h is not None and h.memory_bandwidth_gbps
    return h.memory_bandwidth_gbps, h.dense_bf16_tflops, h.dense_fp8_tflops


# --- step times ---------------------------------------------------------------------------


def test_step_is_base_plus_sequences_plus_prefill_tokens() -> None:
    st = StepTimes(1.0, 2.0, 3.0)
    assert st.step_ms(4) == 9.0  # no prefill chunk unless one is named
    assert st.step_ms(4, 5) == 24.0


@pytest.mark.parametrize(
    ("speed", "want"),
    [
        pytest.param(2.0, StepTimes(1.0, 2.0, 4.0), id="faster-replica-divides-every-step"),
        pytest.param(0.5, StepTimes(4.0, 8.0, 16.0), id="slower-replica-every-step-longer"),
        pytest.param(0.0, StepTimes(2e6, 4e6, 8e6), id="no-speed-very-slow-never-divides-by-0"),
        pytest.param(-1.0, StepTimes(2e6, 4e6, 8e6), id="negative-speed-like-no-speed"),
    ],
)
def test_scaled(speed: float, want: StepTimes) -> None:
    got = StepTimes(2.0, 4.0, 8.0).scaled(speed)
    assert dataclasses.astuple(got) == pytest.approx(dataclasses.astuple(want))


# --- the linear reduction of the shared step model ------------------------------------------


def test_reduction_is_least_squares_over_batches_one_to_max() -> None:
    # decode 10 + b^2 over b = 1..3: mean b 2, mean step 14.67, slope 4, intercept 6.67.
    fit = StepTimes.from_step_model(Quadratic(prefill_per_token=0.01), max_batch=3,
                                    prefill_tokens=100)
    assert fit.per_seq_ms == pytest.approx(4.0)
    assert fit.base_ms == pytest.approx(10.0 + 14.0 / 3.0 - 8.0)
    assert fit.prefill_ms_per_token == pytest.approx(0.01)  # beyond the weight read
    # A range of one batch is widened to two (b = 1, 2: slope 3, intercept 12.5 - 4.5).
    fit1 = StepTimes.from_step_model(Quadratic(prefill_per_token=0.01), max_batch=1,
                                     prefill_tokens=100)
    assert fit1.per_seq_ms == pytest.approx(3.0)
    assert fit1.base_ms == pytest.approx(8.0)


def test_reduction_keeps_a_small_positive_intercept() -> None:
    fit = StepTimes.from_step_model(Linear(0.5, 2.0), max_batch=8, prefill_tokens=100)
    assert fit.base_ms == pytest.approx(0.5)
    assert fit.per_seq_ms == pytest.approx(2.0)


def test_the_fit_spans_batches_up_to_256_and_a_2048_token_prefill() -> None:
    # Least squares of b^2 over b = 1..n has slope n + 1; the intercept is negative (0).
    fit = StepTimes.from_step_model(Quadratic())
    assert fit.per_seq_ms == pytest.approx(257.0)
    assert fit.base_ms == 0.0
    assert fit.prefill_ms_per_token == pytest.approx(2.048)
    assert fit == StepTimes.from_step_model(Quadratic(), 256, 2048)


def test_a_negative_intercept_is_clamped_to_zero() -> None:
    fit = StepTimes.from_step_model(Quadratic(), max_batch=9, prefill_tokens=10)
    assert fit.per_seq_ms == pytest.approx(10.0)
    # mean b^2 over 1..9 is 95 / 3, mean b is 5: intercept 10 + 95/3 - 50 < 0.
    assert fit.base_ms == 0.0
    assert fit.prefill_ms_per_token == pytest.approx(0.01)


# --- seeds ------------------------------------------------------------------------------------


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
    assert seed.kv_ms_per_token == pytest.approx(fit.kv_ms_per_token, rel=0.01)
    assert seed.floor_ms == pytest.approx(fit.floor_ms, rel=0.01)
    assert seed.kv_tokens == pytest.approx(fit.kv_tokens, rel=0.01)
    if fit.attn_ms_per_token2 > 0:  # measured for the 8B shape; 70B scales it (documented)
        assert seed.attn_ms_per_token2 == pytest.approx(fit.attn_ms_per_token2, rel=0.01)


def test_seed_comes_from_the_nearest_measured_size() -> None:
    assert seed_step_times(70.0, "bf16") == SEED_STEP_TIMES[(70.0, "bf16")]
    assert seed_step_times(8.0, "fp8") == SEED_STEP_TIMES[(8.0, "fp8")]
    assert seed_step_times(16.0, "bf16").base_ms == pytest.approx(2 * SEED_8B.base_ms)


def test_seed_for_a_model_below_a_billion_parameters_scales_down() -> None:
    half = seed_step_times(0.5, "bf16")
    assert half.base_ms == pytest.approx(SEED_8B.base_ms / 16)
    assert half.per_seq_ms == pytest.approx(SEED_8B.per_seq_ms / 16)
    assert half.prefill_ms_per_token == pytest.approx(SEED_8B.prefill_ms_per_token / 16)


def test_seed_without_a_usable_model_size_is_the_8b_profile() -> None:
    assert seed_step_times(None, "bf16") == SEED_8B
    assert seed_step_times(0.0, "bf16") == SEED_8B


def test_fp8_is_faster_and_fp16_streams_like_bf16() -> None:
    assert seed_step_times(8.0, "fp8").base_ms < SEED_8B.base_ms
    assert seed_step_times(8.0, "fp16") == SEED_8B


def test_seed_scales_to_the_gpu() -> None:
    h200 = seed_step_times(8.0, "bf16", "NVIDIA H200")
    h100 = seed_step_times(8.0, "bf16", "H100-SXM5-80GB")
    bandwidth, _ = hardware_ratios("H100-SXM5-80GB")
    assert h100.base_ms == pytest.approx(h200.base_ms / bandwidth)
    assert h100.base_ms > h200.base_ms  # less memory bandwidth: slower decode
    assert seed_step_times(8.0, "bf16", "no-such-gpu") == h200  # unknown: the seed as is


def test_seed_on_another_gpu_divides_decode_by_bandwidth_and_prefill_by_compute() -> None:
    bandwidth, compute = hardware_ratios("NVIDIA L40S", "bf16")
    seed = seed_step_times(8.0, "bf16", "NVIDIA L40S")
    assert seed.base_ms == pytest.approx(SEED_8B.base_ms / bandwidth)
    assert seed.per_seq_ms == pytest.approx(SEED_8B.per_seq_ms / bandwidth)
    assert seed.prefill_ms_per_token == pytest.approx(SEED_8B.prefill_ms_per_token / compute)


def test_the_seed_gpu_and_no_gpu_have_ratio_one() -> None:
    assert hardware_ratios("") == (1.0, 1.0)
    assert hardware_ratios(SEED_PRODUCT) == pytest.approx((1.0, 1.0))
    assert hardware_ratios(SEED_PRODUCT, "fp8") == pytest.approx((1.0, 1.0))
    assert seed_step_times(8.0, "bf16", SEED_PRODUCT) == SEED_8B


def test_hardware_ratios_take_the_precision_s_compute() -> None:
    bw, bf16, fp8 = hw("NVIDIA L40S")
    ref_bw, ref_bf16, ref_fp8 = hw(SEED_PRODUCT)
    assert bf16 and fp8 and ref_bf16 and ref_fp8
    assert hardware_ratios("NVIDIA L40S", "fp8") == pytest.approx((bw / ref_bw, fp8 / ref_fp8))
    assert hardware_ratios("NVIDIA L40S", "bf16") == pytest.approx(
        (bw / ref_bw, bf16 / ref_bf16))
    assert hardware_ratios("NVIDIA L40S") == hardware_ratios("NVIDIA L40S", "bf16")
    # No compute figure in the catalogue: prefill scales with the bandwidth too.
    a10_bw, a10_bf16, _ = hw("NVIDIA A10G")
    assert a10_bf16 is None
    assert hardware_ratios("NVIDIA A10G") == pytest.approx((a10_bw / ref_bw, a10_bw / ref_bw))


def test_the_request_shape_before_traffic_is_the_documented_one() -> None:
    loop = one_line((REPO / "docs" / "slo-loop.md").read_text())
    placement = one_line((REPO / "docs" / "placement.md").read_text())
    m = re.search(r"the last seen values, or (\d+) / (\d+), without traffic", loop)
    assert m, "docs/slo-loop.md no longer states the request shape before traffic"
    assert (float(m[1]), float(m[2])) == (DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS)
    m = re.search(r"default request shape of (\d+) prompt and (\d+) output tokens", placement)
    assert m, "docs/placement.md no longer states the default request shape"
    assert (float(m[1]), float(m[2])) == (DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS)


# --- rates --------------------------------------------------------------------------------


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


def test_rate_grows_with_batch() -> None:
    rates = [rate_at_batch(SEED_8B, b, 500, 200) for b in (1, 8, 64, 256)]
    assert rates == sorted(rates)


def test_predicted_tokens_per_second() -> None:
    assert predicted_tokens_per_s(ST, 4) == pytest.approx(1000.0 * 4 / 6.0)
    assert predicted_tokens_per_s(ST, 0) == pytest.approx(1000.0 / 3.0)  # at least one


# --- the per-token budget -------------------------------------------------------------------


def test_budget_leaves_room_for_first_token_and_long_outputs() -> None:
    # 10 s e2e, 1 s TTFT, 200-token mean output: a 480-token tail request, 80% margin.
    tail = TAIL_OUTPUT_FACTOR * 200 - 1
    assert itl_budget_ms(10_000, 1_000, None, 200) == pytest.approx(0.8 * 9_000 / tail)
    assert itl_budget_ms(10_000, 1_000, 15, 200) == pytest.approx(12.0)


def test_budget_edges() -> None:
    # A first-token target at or above the e2e target leaves nothing for decoding.
    assert itl_budget_ms(1_000, 2_000, None, 100) == 0.0
    # Very short outputs: the tail request still has at least one token to decode.
    assert itl_budget_ms(10_000, 1_000, None, 0.5) == pytest.approx(0.8 * 9_000)


# --- the SLO-feasible batch ------------------------------------------------------------------


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


def test_feasible_batch_is_the_largest_within_budget() -> None:
    """Without prefill the inter-token latency is the step, 10 + b ms: 30 ms allows b = 20."""
    cap = replica_capacity(StepTimes(10.0, 1.0, 0.0), prompt_tokens=0, output_tokens=100,
                           itl_budget=30.0, min_batch=1, max_batch=64)
    assert cap.feasible and cap.batch == 20 and type(cap.batch) is int
    assert cap.itl_ms == pytest.approx(30.0)


def test_a_budget_equal_to_the_best_latency_is_feasible() -> None:
    first = replica_capacity(ST, prompt_tokens=500, output_tokens=100, itl_budget=1_000.0,
                             min_batch=4, max_batch=64)
    exact = replica_capacity(ST, prompt_tokens=500, output_tokens=100,
                             itl_budget=first.best_itl_ms, min_batch=4, max_batch=64)
    assert exact.feasible and exact.batch == 4


def test_tighter_inter_token_target_means_smaller_batch_and_less_per_replica() -> None:
    loose = replica_capacity(SEED_8B, prompt_tokens=500, output_tokens=200, itl_budget=20.0,
                             min_batch=1, max_batch=512)
    tight = replica_capacity(SEED_8B, prompt_tokens=500, output_tokens=200, itl_budget=8.0,
                             min_batch=1, max_batch=512)
    assert loose.feasible and tight.feasible
    assert tight.batch < loose.batch and tight.rate < loose.rate
    assert tight.itl_ms <= 8.0 and loose.itl_ms <= 20.0


def test_unreachable_target_is_flagged_and_sized_for_throughput() -> None:
    cap = replica_capacity(SEED_8B, prompt_tokens=500, output_tokens=200, itl_budget=2.0,
                           min_batch=8, max_batch=256)
    assert not cap.feasible and cap.best_itl_ms > 2.0
    assert cap.batch >= 8 and cap.rate > 0


@pytest.mark.parametrize(
    ("max_batch", "want_knee"),
    [
        pytest.param(64, 8, id="knee-is-the-last-doubling-within-1.5x-the-smallest-step"),
        pytest.param(4, 4, id="knee-stops-at-the-largest-batch"),
    ],
)
def test_infeasible_targets_size_at_the_knee(max_batch: int, want_knee: int) -> None:
    """Steps of 10 + b ms from batch 2 (12 ms): batch 8 is the last at <= 1.5x (18 ms)."""
    cap = replica_capacity(StepTimes(10.0, 1.0, 0.0), prompt_tokens=0, output_tokens=100,
                           itl_budget=1.0, min_batch=2, max_batch=max_batch)
    assert not cap.feasible and cap.best_itl_ms == pytest.approx(12.0)
    assert cap.batch == want_knee
    assert cap.rate == pytest.approx(0.8 * 1000.0 / (100 * (10.0 + want_knee) / want_knee))
    assert cap.itl_ms == pytest.approx(10.0 + want_knee)


@pytest.mark.parametrize("itl_ms", [40.0, 100.0])
def test_long_prompts_get_a_smaller_chunk_budget_whose_step_fits_the_objective(
        itl_ms: float) -> None:
    budgets = []
    for prompt in (1_000.0, 12_000.0, 60_000.0):
        tokens, fits = chunk_budget_for_itl(SEED_8B, itl_ms, 16, default=8192, floor=256,
                                            prompt_tokens=prompt, output_tokens=250.0)
        budgets.append(tokens)
        if fits and tokens > 512:
            assert chunk_step_ms(SEED_8B, 16, tokens, prompt, 250.0) <= itl_ms
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > budgets[-1]


def test_a_small_chunk_budget_paces_long_prompts_and_caps_the_batch_it_pays_to_run() -> None:
    # 12k-token prompts through 512-token chunks need ~25 steps each: fewer requests a
    # second than through 2048-token chunks, and fewer than the decode alone would allow.
    small = rate_at_batch(SEED_8B, 32, 12_000.0, 200.0, chunk_tokens=512)
    large = rate_at_batch(SEED_8B, 32, 12_000.0, 200.0, chunk_tokens=2048)
    assert small < large <= rate_at_batch(SEED_8B, 32, 12_000.0, 200.0)
    # Decode tokens take the budget first: the batch planned leaves prompts room in it.
    cap = replica_capacity(SEED_8B, prompt_tokens=1_100.0, output_tokens=250.0,
                           itl_budget=24.0, min_batch=1, max_batch=256, chunk_tokens=512)
    assert cap.batch < 256
    assert cap.rate > rate_at_batch(SEED_8B, 256, 1_100.0, 250.0, chunk_tokens=512)
