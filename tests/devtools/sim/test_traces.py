"""Trace loader: counts, scaling factors, generated arrivals' rate and spread, the ramp."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from slo_devtools.sim import traces as T


def test_azure_traces_load_unchanged() -> None:
    code, conv = T.azure("azure-code"), T.azure("azure-conv")
    assert len(code.requests) == 8819
    assert len(conv.requests) == 19366
    assert code.requests[0].t == 0.0
    assert all(a.t <= b.t for a, b in zip(conv.requests, conv.requests[1:], strict=False))
    assert 55 * 60 < code.duration < 60 * 60
    assert statistics.fmean(r.prompt for r in conv.requests) > 500


@pytest.mark.parametrize(("factor", "want"), [(2.0, 2.0), (3.0, 3.0), (0.5, 0.5), (1.5, 1.5)])
def test_rate_scaling_keeps_the_shape_and_reports_the_factor(factor: float, want: float) -> None:
    base = T.azure("azure-conv")
    tr = T.azure("azure-conv", rate_scale=factor, seed=3)
    assert tr.rate_scale == factor
    assert len(tr.requests) / len(base.requests) == pytest.approx(want, rel=0.03)
    # Per-minute shape: each minute scales by about the factor.
    b, s = base.window_rates(600), tr.window_rates(600)
    for x, y in zip(b, s, strict=True):
        assert y == pytest.approx(x * want, rel=0.1)


def test_time_compression_shortens_the_trace() -> None:
    tr = T.azure("azure-code", time_compression=4.0)
    base = T.azure("azure-code")
    assert tr.duration == pytest.approx(base.duration / 4)
    assert tr.rate_factor == 4.0
    assert len(tr.requests) == len(base.requests)


def test_gamma_arrivals_have_the_asked_rate_and_cv() -> None:
    times = T.gamma_arrivals([20.0] * 20, 600.0, 1.2, random.Random(1))
    assert len(times) / 12000.0 == pytest.approx(20.0, rel=0.03)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.2, rel=0.05)


def test_servegen_day_is_scaled_to_its_peak_and_compressed() -> None:
    tr = T.servegen_day("m-large", 0, peak_rate=30.0, time_compression=8.0, seed=0)
    rates = tr.window_rates(600.0 / 8)
    assert tr.duration == pytest.approx(86400 / 8)
    assert max(rates) == pytest.approx(30.0, rel=0.15)
    assert max(rates) / statistics.fmean(rates) > 1.8  # the daily cycle survives
    assert any("Gamma" in n for n in tr.notes)


def test_ramp_follows_its_phases() -> None:
    tr = T.ramp(rate_scale=2.0, seed=0)
    r = tr.window_rates(600.0)
    assert tr.duration == 3600.0
    assert r[0] == pytest.approx(4.0, rel=0.1)
    assert r[2] == pytest.approx(20.0, rel=0.1)
    assert r[3] == pytest.approx(20.0, rel=0.1)
    assert r[5] == pytest.approx(2.0, rel=0.2)


def test_merge_keeps_tenants_and_order() -> None:
    m = T.merge("both", [T.azure("azure-code"), T.azure("azure-conv")])
    assert m.tenants == ("azure-conv", "azure-code") or set(m.tenants) == {"azure-code",
                                                                         "azure-conv"}
    assert len(m.requests) == 8819 + 19366


def test_unknown_names_say_which_field() -> None:
    with pytest.raises(ValueError, match="trace"):
        T.azure("azure-chat")
    with pytest.raises(ValueError, match="rate_scale"):
        T.azure("azure-code", rate_scale=0)


def test_long_context_lengths_follow_the_documented_distribution() -> None:
    tr = T.long_context(seed=1)
    prompts = sorted(r.prompt for r in tr.requests)
    assert len(tr.requests) == len(T.azure("azure-conv").requests)  # the hour's arrivals
    assert prompts[0] >= T.LONG_MIN_PROMPT
    assert all(r.prompt + r.output <= T.MAX_MODEL_LEN for r in tr.requests)
    assert statistics.fmean(prompts) == pytest.approx(12_000, rel=0.15)
    assert prompts[int(0.99 * len(prompts))] == pytest.approx(85_000, rel=0.2)


def test_long_context_later_turns_reuse_the_previous_turn_as_prefix() -> None:
    tr = T.long_context(seed=2)
    last: dict[int, T.Request] = {}
    later = 0
    for r in tr.requests:
        assert r.session >= 0
        if r.prefix:
            prev = last[r.session]
            assert r.prefix == prev.prompt + prev.output
            assert r.prompt > r.prefix
            assert r.t >= prev.t + T.LONG_ANSWER_S
            later += 1
        else:
            assert r.session not in last  # a conversation starts once
        last[r.session] = r
    # Mean 2 turns per conversation: about half the requests are later turns.
    assert later / len(tr.requests) == pytest.approx(0.5, abs=0.1)
    assert any("later turns" in n for n in tr.notes)
