"""Capacity model edges: the fit's default range, a replica slower than the seed, a speed
of zero, the seed GPU's own ratios."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.control.capacity import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    SEED_PRODUCT,
    SEED_STEP_TIMES,
    StepTimes,
    hardware_ratios,
    seed_step_times,
)
from tests.support.paths import REPO


@dataclasses.dataclass(frozen=True)
class Curved:
    """Decode 10 + b^2 and prefill 10 + t^2 / 1000: both fits depend on their range."""

    weights_ms: float = 10.0

    def decode_ms(self, batch: int, context_tokens: int | None = None) -> float:
        return self.weights_ms + float(batch) ** 2

    def prefill_ms(self, tokens: int) -> float:
        return self.weights_ms + tokens**2 / 1000.0


def test_the_fit_spans_batches_up_to_256_and_a_2048_token_prefill() -> None:
    # Least squares of b^2 over b = 1..n has slope n + 1; the intercept is negative (0).
    fit = StepTimes.from_step_model(Curved())
    assert fit.per_seq_ms == pytest.approx(257.0)
    assert fit.base_ms == 0.0
    assert fit.prefill_ms_per_token == pytest.approx(2.048)
    assert fit == StepTimes.from_step_model(Curved(), 256, 2048)


def test_fit_of_a_wider_range() -> None:
    fit = StepTimes.from_step_model(Curved(), max_batch=9, prefill_tokens=10)
    assert fit.per_seq_ms == pytest.approx(10.0)
    # mean b^2 over 1..9 is 95 / 3, mean b is 5: intercept 10 + 95/3 - 50 < 0.
    assert fit.base_ms == 0.0
    assert fit.prefill_ms_per_token == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("speed", "expected"),
    [
        (0.5, StepTimes(4.0, 8.0, 16.0)),  # slower than the seed: every step longer
        (0.0, StepTimes(2e6, 4e6, 8e6)),  # no speed at all: very slow, never a division by 0
        (-1.0, StepTimes(2e6, 4e6, 8e6)),
    ],
)
def test_scaled(speed: float, expected: StepTimes) -> None:
    got = StepTimes(2.0, 4.0, 8.0).scaled(speed)
    assert dataclasses.astuple(got) == pytest.approx(dataclasses.astuple(expected))


def test_the_seed_gpu_and_no_gpu_have_ratio_one() -> None:
    assert hardware_ratios("") == (1.0, 1.0)
    assert hardware_ratios(SEED_PRODUCT) == pytest.approx((1.0, 1.0))
    assert hardware_ratios(SEED_PRODUCT, "fp8") == pytest.approx((1.0, 1.0))
    assert seed_step_times(8.0, "bf16", SEED_PRODUCT) == SEED_STEP_TIMES[(8.0, "bf16")]


def test_the_request_shape_before_traffic_is_the_documented_one() -> None:
    docs = REPO / "docs"
    assert (DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS) == (512.0, 128.0)
    assert "the last seen values, or 512 / 128,\nwithout traffic" in \
        (docs / "slo-loop.md").read_text()
    assert "default request shape of 512 prompt\nand 128 output tokens" in \
        (docs / "placement.md").read_text()
