"""ControlState wire form: every field, its rounding, its bounds and its trimming."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from slo_operator.control import ControlState

T0 = 1_800_000_000.0

FULL = ControlState(
    last_good_replicas=3, last_good_limit=48, last_good_time=T0,
    recommendations=((T0 - 10.12345, 3),), history_since=T0 - 600.5,
    last_scale_time=T0 - 30.0, last_scale_direction=-1,
    speed=1.23456, speed_key="H200/bf16", speed_samples=7,
    correction=1.55556, limit_bias=0.77777,
    limits=((T0 - 5.0, 48),), rates=((T0 - 15.0, 12.34567),),
    prompt_tokens=500.12345, output_tokens=200.5, last_waiting=3.0, last_time=T0,
    extra={"k": "v"},
)
WIRE = {
    "v": 1,
    "lastGood": {"replicas": 3, "limit": 48, "time": T0},
    "recommendations": [[1_799_999_989.877, 3]],
    "historySince": T0 - 600.5,
    "lastScale": {"time": T0 - 30.0, "direction": -1},
    "speed": 1.2346, "speedKey": "H200/bf16", "speedSamples": 7,
    "correction": 1.5556, "limitBias": 0.7778,
    "limits": [[T0 - 5.0, 48]], "rates": [[T0 - 15.0, 12.3457]],
    "promptTokens": 500.123, "outputTokens": 200.5, "lastWaiting": 3.0, "lastTime": T0,
    "extra": {"k": "v"},
}


def test_every_field_is_written_rounded() -> None:
    assert FULL.to_dict() == WIRE


def test_every_field_is_read_back() -> None:
    assert ControlState.from_dict(WIRE) == dataclasses.replace(
        FULL, recommendations=((1_799_999_989.877, 3),), speed=1.2346, correction=1.5556,
        limit_bias=0.7778, rates=((T0 - 15.0, 12.3457),), prompt_tokens=500.123)


def test_defaults_are_what_an_empty_status_reads_as() -> None:
    assert ControlState.from_dict({}) == ControlState()
    assert ControlState().to_dict() == {"v": 1, "recommendations": [], "speed": 1.0,
                                        "speedKey": "", "speedSamples": 0, "correction": 1.0,
                                        "limitBias": 1.0, "limits": [], "rates": []}
    assert ControlState().last_good_time is None


def test_state_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ControlState().speed = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(("wire", "field", "want"), [
    ({"lastGood": {"replicas": 0, "limit": 0}}, "last_good_replicas", 0),
    ({"lastGood": {"replicas": 0, "limit": 0}}, "last_good_limit", 0),
    ({"lastScale": {"time": 1.0, "direction": -1}}, "last_scale_direction", -1),
    ({"lastScale": {"time": 1.0, "direction": -5}}, "last_scale_direction", -1),
    ({"lastScale": {"time": 1.0}}, "last_scale_direction", 0),
    ({"speed": 0.5}, "speed", 0.5),
    ({"speed": 20.5}, "speed", 1.0),
    ({"correction": 0.5}, "correction", 0.5),
    ({"correction": 10.0}, "correction", 10.0),
    ({"correction": 10.5}, "correction", 1.0),
    ({"limitBias": 0.5}, "limit_bias", 0.5),
    ({"limitBias": 1000.5}, "limit_bias", 1.0),
    ({"promptTokens": 0.5}, "prompt_tokens", 0.5),
    ({"outputTokens": 0.5}, "output_tokens", 0.5),
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


def test_non_finite_times_are_left_out() -> None:
    wire = ControlState(last_time=float("inf"), prompt_tokens=float("nan")).to_dict()
    assert "lastTime" not in wire and "promptTokens" not in wire
