"""Pure analysis of long-context measurements: chunked-prefill totals and the fits."""

from __future__ import annotations

import pytest

from slo_runtime import profile_math as pm


def test_chunked_prefill_totals_sum_the_leading_chunks() -> None:
    chunks = [10.0, 12.0, 14.0, 16.0]
    assert pm.chunked_prefill_totals(chunks, 2048, [2048, 4096, 8192]) == {
        2048: 10.0, 4096: 22.0, 8192: 52.0}
    # A last partial chunk is a whole chunk step.
    assert pm.chunked_prefill_totals(chunks, 2048, [2049]) == {2049: 22.0}


def test_chunked_prefill_totals_refuse_a_prompt_longer_than_the_pass() -> None:
    with pytest.raises(ValueError, match="prompt of 10000 tokens needs 5 chunks of 2048"):
        pm.chunked_prefill_totals([1.0] * 4, 2048, [10000])


def test_slope_through_origin_is_least_squares() -> None:
    assert pm.slope_through_origin([(1.0, 2.0), (2.0, 4.0)]) == pytest.approx(2.0)
    # y = 1, 3 at x = 1, 2: sum(xy) / sum(x^2) = 7 / 5.
    assert pm.slope_through_origin([(1.0, 1.0), (2.0, 3.0)]) == pytest.approx(1.4)
    assert pm.slope_through_origin([(0.0, 5.0)]) == 0.0
    assert pm.slope_through_origin([]) == 0.0


def test_attention_coefficient_recovers_a_linear_context_cost() -> None:
    k = 1.5e-6   # ms per (chunk token x context token)
    table = {str(t): {str(c): 0.025 * t + k * t * c for c in (0, 8192, 65536)}
             for t in (2048, 8192)}
    assert pm.attention_ms_per_token2(table) == pytest.approx(k)


def test_attention_coefficient_needs_the_chunk_without_context() -> None:
    assert pm.attention_ms_per_token2({"2048": {"8192": 80.0, "65536": 250.0}}) == 0.0
    assert pm.attention_ms_per_token2({}) == 0.0
    # Noise that makes context look free is not a negative cost.
    assert pm.attention_ms_per_token2({"2048": {"0": 50.0, "8192": 49.0}}) == 0.0


def test_kv_read_cost_is_fitted_against_the_shortest_context() -> None:
    k = 3e-5     # ms per cached token
    table = {str(c): {str(b): 5.0 + 0.01 * b + k * b * c for b in (1, 8)}
             for c in (1024, 32768, 65536)}
    assert pm.kv_ms_per_token(table) == pytest.approx(k)
    # A batch measured only at a long context has no baseline and is left out.
    table["65536"]["64"] = 1e6
    assert pm.kv_ms_per_token(table) == pytest.approx(k)
    assert pm.kv_ms_per_token({"1024": {"1": 5.0}}) == 0.0
    assert pm.kv_ms_per_token({}) == 0.0
