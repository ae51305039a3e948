"""ControlState in status: the wire form of every field, its rounding, bounds and trimming;
reading back never raises, never lets a wrong type through, and a restarted operator
decides as the running one would have."""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from slo_operator.control import ControlState, decide
from tests.operator.control.control_support import T0, history, make_obs, make_policy

FULL = ControlState(
    last_good_replicas=3, last_good_limit=48, last_good_time=T0,
    recommendations=((T0 - 10.12345, 3),), history_since=T0 - 600.5,
    last_scale_time=T0 - 30.0, last_scale_direction=-1,
    speed=1.23456, speed_key="H200/bf16", speed_samples=7, prefill_error=1.41421,
    correction=1.55556, limit_bias=0.77777,
    limits=((T0 - 5.0, 48),), rates=((T0 - 15.0, 12.34567),), loads=((T0 - 15.0, 2.54321),),
    prompt_tokens=500.12345, output_tokens=200.5, answer_tail=1000.0, last_waiting=3.0,
    last_time=T0,
    short_time=T0 - 40.0, itl_over=0.5, jitter_over=1.25, extra={"k": "v"},
)
WIRE = {
    "v": 1,
    "lastGood": {"replicas": 3, "limit": 48, "time": T0},
    "recommendations": [[1_799_999_989.877, 3]],
    "historySince": T0 - 600.5,
    "lastScale": {"time": T0 - 30.0, "direction": -1},
    "speed": 1.2346, "speedKey": "H200/bf16", "speedSamples": 7, "prefillError": 1.414,
    "correction": 1.5556, "limitBias": 0.7778,
    "limits": [[T0 - 5.0, 48]], "rates": [[T0 - 15.0, 12.3457]], "loads": [[T0 - 15.0, 2.5432]],
    "promptTokens": 500.123, "outputTokens": 200.5, "answerTailTokens": 1000.0,
    "lastWaiting": 3.0, "lastTime": T0, "shortTime": T0 - 40.0, "itlOver": 0.5,
    "jitterOver": 1.25, "extra": {"k": "v"},
}


# --- the wire form ------------------------------------------------------------------------


def test_every_field_is_written_rounded() -> None:
    assert FULL.to_dict() == WIRE


def test_every_field_is_read_back() -> None:
    assert ControlState.from_dict(WIRE) == replace(
        FULL, recommendations=((1_799_999_989.877, 3),), speed=1.2346, prefill_error=1.414,
        correction=1.5556,
        limit_bias=0.7778, rates=((T0 - 15.0, 12.3457),), loads=((T0 - 15.0, 2.5432),),
        prompt_tokens=500.123)


def test_an_empty_status_reads_as_a_fresh_state_and_writes_no_nulls() -> None:
    assert ControlState.from_dict({}) == ControlState()
    assert ControlState().to_dict() == {"v": 1, "recommendations": [], "speed": 1.0,
                                        "speedKey": "", "speedSamples": 0, "correction": 1.0,
                                        "limitBias": 1.0, "limits": [], "rates": [],
                                        "loads": []}


def test_non_finite_times_are_left_out() -> None:
    wire = ControlState(last_time=float("inf"), prompt_tokens=float("nan")).to_dict()
    assert "lastTime" not in wire and "promptTokens" not in wire


def test_evolve_returns_a_copy_and_leaves_the_stored_state_alone() -> None:
    new = FULL.evolve(speed=2.0, limits=())
    assert (new.speed, new.limits) == (2.0, ())
    assert new == replace(FULL, speed=2.0, limits=())
    assert FULL.to_dict() == WIRE


# --- reading back what status holds ---------------------------------------------------------


@pytest.mark.parametrize(("wire", "field", "want"), [
    pytest.param({"lastGood": {"replicas": 0, "limit": 0}}, "last_good_replicas", 0,
                 id="zero-replicas-is-a-good-decision"),
    pytest.param({"lastGood": {"replicas": 0, "limit": 0}}, "last_good_limit", 0,
                 id="zero-limit-is-read"),
    pytest.param({"lastScale": {"time": 1.0, "direction": -1}}, "last_scale_direction", -1,
                 id="scale-down-direction"),
    pytest.param({"lastScale": {"time": 1.0, "direction": -5}}, "last_scale_direction", -1,
                 id="direction-clamped-to-minus-one"),
    pytest.param({"lastScale": {"time": 1.0}}, "last_scale_direction", 0,
                 id="no-direction-never-scaled"),
    pytest.param({"speed": 0.5}, "speed", 0.5, id="speed-inside-its-range"),
    pytest.param({"speed": 20.5}, "speed", 1.0, id="speed-beyond-its-range-resets"),
    pytest.param({"correction": 0.5}, "correction", 0.5, id="correction-inside-its-range"),
    pytest.param({"correction": 10.0}, "correction", 10.0, id="correction-at-its-maximum"),
    pytest.param({"correction": 10.5}, "correction", 1.0, id="correction-beyond-resets"),
    pytest.param({"limitBias": 0.5}, "limit_bias", 0.5, id="limit-bias-inside-its-range"),
    pytest.param({"limitBias": 1000.5}, "limit_bias", 1.0, id="limit-bias-beyond-resets"),
    pytest.param({"promptTokens": 0.5}, "prompt_tokens", 0.5, id="fractional-prompt-length"),
    pytest.param({"outputTokens": 0.5}, "output_tokens", 0.5, id="fractional-output-length"),
    pytest.param({"speedSamples": 0}, "speed_samples", 0, id="no-speed-samples"),
    pytest.param({"speedSamples": 1}, "speed_samples", 1, id="one-speed-sample"),
    pytest.param({"speedSamples": -1}, "speed_samples", 0, id="negative-samples-are-none"),
])
def test_values_are_read_within_their_bounds(wire: dict[str, Any], field: str,
                                             want: Any) -> None:
    assert getattr(ControlState.from_dict(wire), field) == want


def test_histories_are_trimmed_to_their_newest_entries() -> None:
    s = ControlState.from_dict({
        "recommendations": [[float(i), 1] for i in range(130)],
        "rates": [[float(i), 1.0] for i in range(50)],
        "limits": [[float(i), 8] for i in range(12)],
    })
    assert (len(s.recommendations), len(s.rates), len(s.limits)) == (128, 48, 10)
    assert s.recommendations[0][0] == 2.0 and s.rates[0][0] == 2.0 and s.limits[0][0] == 2.0


@pytest.mark.parametrize("garbage", [
    None, 42, "x", [], {"v": "nope"},
    {"lastGood": {"replicas": -3, "limit": 0.5},
     "recommendations": [[1, 2, 3], ["a", 1], [5, 1.5]]},
    {"speed": float("nan"), "correction": 1e9, "rates": "many", "lastScale": {"direction": 7}},
    {"speed": 10**400, "correction": -10**400, "rates": [[10**400, 1.0]],
     "lastGood": {"replicas": 10**400}},
], ids=["none", "int", "str", "list", "bad-version", "bad-values", "nan-and-huge",
        "beyond-any-float"])
def test_unreadable_state_falls_back_to_defaults(garbage: Any) -> None:
    s = ControlState.from_dict(garbage)
    assert s.speed == 1.0 and s.correction == 1.0
    assert s.last_good_replicas is None and s.recommendations == ()
    assert -1 <= s.last_scale_direction <= 1


def conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` names (unions, tuples of pairs, mappings)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, type(int | None)):
        return any(conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(conforms(v, a)
                                               for v, a in zip(value, args, strict=True))
    if origin is not None:
        return isinstance(value, origin) and (origin is not Mapping or all(
            conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items()))
    return type(value) is hint


FULL_WIRE = {
    "v": 1, "lastGood": {"replicas": 3, "limit": 48, "time": T0},
    "recommendations": [[T0, 3]], "historySince": T0, "lastScale": {"time": T0, "direction": 1},
    "speed": 1.5, "speedKey": "H200/bf16", "speedSamples": 4, "prefillError": 0.8,
    "correction": 1.2,
    "limitBias": 0.9, "limits": [[T0, 48]], "rates": [[T0, 2]], "loads": [[T0, 1.5]],
    "promptTokens": 500,
    "outputTokens": 200, "answerTailTokens": 500, "lastWaiting": 1, "lastTime": T0,
    "jitterOver": 1.5, "extra": {"k": "v"},
}
JUNK_WIRE = {
    "lastGood": {"replicas": 2.0, "limit": "48", "time": "x"}, "recommendations": "x",
    "lastScale": {"time": True, "direction": 7.0}, "speed": "fast", "speedKey": 3,
    "speedSamples": 2.5, "prefillError": "slow", "correction": None, "limitBias": [],
    "limits": [[1, 2.5]],
    "rates": [[1, True]], "loads": [["x", 1]], "promptTokens": -1, "outputTokens": float("inf"),
    "answerTailTokens": "long",
    "lastWaiting": "3", "lastTime": float("nan"), "extra": ["x"],
}


@pytest.mark.parametrize("wire", [None, {}, FULL_WIRE, JUNK_WIRE],
                         ids=["none", "empty", "full", "junk"])
def test_read_back_values_have_the_declared_types(wire: Any) -> None:
    state = ControlState.from_dict(wire)
    for name, hint in typing.get_type_hints(ControlState).items():
        value = getattr(state, name)
        assert conforms(value, hint), (name, value, hint)


def test_a_full_wire_round_trips() -> None:
    assert ControlState.from_dict(FULL_WIRE).to_dict() == FULL_WIRE


# --- across a restart -----------------------------------------------------------------------


def test_state_round_trips_through_json_and_a_restart_decides_alike() -> None:
    d = decide(make_obs(desired=2, rate=80.0, e2e=12_000.0), make_policy(),
               ControlState(recommendations=history(2, since=T0 - 600)), T0)
    wire = json.loads(json.dumps(d.state.to_dict()))
    back = ControlState.from_dict(wire)
    assert back.to_dict() == d.state.to_dict()
    assert back.last_good_replicas == d.replicas
    # The restarted operator decides as the running one would have.
    nxt = make_obs(desired=d.replicas, rate=80.0, e2e=12_000.0)
    a = decide(nxt, make_policy(), d.state, T0 + 15)
    b = decide(nxt, make_policy(), back, T0 + 15)
    assert (a.replicas, a.batch_limit, a.reason) == (b.replicas, b.batch_limit, b.reason)
