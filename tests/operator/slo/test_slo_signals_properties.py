"""parse_signals over arbitrary replies: never raises, never invents a number."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from slo_operator.api.observe import ServiceKey
from slo_operator.slo.promql import QUERY_NAMES, build_queries
from slo_operator.slo.signals import SignalSpec, parse_signals

PLAN = build_queries([60])
KEYS = [ServiceKey("a", "s"), ServiceKey("b", "t")]
label = st.sampled_from(["a", "b", "s", "t", "", "60s", "gateway", "engine", "legacy",
                         "requests", "sum", "pods", "newest", "+Inf", "0.5", "1.0", "x"])
value = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "", "abc"]),
                  st.floats(allow_nan=True, allow_infinity=True).map(str),
                  st.integers(-5, 10**6).map(str))
row = st.fixed_dictionaries({
    "metric": st.dictionaries(st.sampled_from(["namespace", "service", "le", "window",
                                                "source", "signal", "stat"]), label),
    "value": st.tuples(st.floats(min_value=0, max_value=2e9), value).map(list),
})
reply: Any = st.one_of(st.none(), st.lists(st.one_of(row, st.integers(), st.text(max_size=3)),
                                            max_size=30))


@given(results=st.fixed_dictionaries({n: reply for n in QUERY_NAMES}))
@settings(max_examples=300, deadline=None)
def test_garbage_in_typed_state_out(results: dict[str, Any]) -> None:
    got = parse_signals(PLAN, results, dict.fromkeys(KEYS, SignalSpec()), 2e9)
    assert set(got) == set(KEYS)
    for s in got.values():
        for v in (s.e2e_ms, s.ttft_ms, s.itl_ms, s.jitter, s.request_rate, s.waiting,
                  s.running, s.kv_usage):
            assert v is None or math.isfinite(v)
        assert s.message
