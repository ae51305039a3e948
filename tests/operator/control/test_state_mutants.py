"""ControlState read back from status holds values of the declared types, whatever the
status held (from_dict never raises and never lets a wrong type through)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

import pytest

from slo_operator.control import ControlState

T0 = 1_800_000_000.0


def _conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` names (unions, tuples of pairs, mappings)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, type(int | None)):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(_conforms(v, a)
                                               for v, a in zip(value, args, strict=True))
    if origin is not None:
        return isinstance(value, origin) and (origin is not Mapping or all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items()))
    return type(value) is hint


WIRES = [
    None,
    {},
    {"v": 1, "lastGood": {"replicas": 3, "limit": 48, "time": T0},
     "recommendations": [[T0, 3]], "historySince": T0, "lastScale": {"time": T0,
                                                                     "direction": 1},
     "speed": 1.5, "speedKey": "H200/bf16", "speedSamples": 4, "correction": 1.2,
     "limitBias": 0.9, "limits": [[T0, 48]], "rates": [[T0, 2]], "promptTokens": 500,
     "outputTokens": 200, "lastWaiting": 1, "lastTime": T0, "extra": {"k": "v"}},
    {"lastGood": {"replicas": 2.0, "limit": "48", "time": "x"}, "recommendations": "x",
     "lastScale": {"time": True, "direction": 7.0}, "speed": "fast", "speedKey": 3,
     "speedSamples": 2.5, "correction": None, "limitBias": [], "limits": [[1, 2.5]],
     "rates": [[1, True]], "promptTokens": -1, "outputTokens": float("inf"),
     "lastWaiting": "3", "lastTime": float("nan"), "extra": ["x"]},
]


def test_every_field_has_a_declared_type() -> None:
    hints = typing.get_type_hints(ControlState)
    assert set(hints) == {f.name for f in dataclasses.fields(ControlState)}


@pytest.mark.parametrize("wire", WIRES, ids=["none", "empty", "full", "junk"])
def test_read_back_values_have_the_declared_types(wire: Any) -> None:
    state = ControlState.from_dict(wire)
    for name, hint in typing.get_type_hints(ControlState).items():
        value = getattr(state, name)
        assert _conforms(value, hint), (name, value, hint)


def test_a_full_wire_round_trips() -> None:
    state = ControlState.from_dict(WIRES[2])
    assert state.to_dict() == WIRES[2]


def test_speed_samples_read_back() -> None:
    assert ControlState.from_dict({"speedSamples": 0}).speed_samples == 0
    assert ControlState.from_dict({"speedSamples": 1}).speed_samples == 1
    assert ControlState.from_dict({"speedSamples": -1}).speed_samples == 0
