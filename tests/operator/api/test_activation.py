"""The wake annotation and the activator's slices as the operator reads them: anybody may
write an annotation, so what is not a wake is ignored, never an error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slo_operator.api.activation import (
    ActivatorEndpoints,
    Wake,
    activator_slice_endpoints,
    parse_wake,
)


def test_a_wake_reads_back_as_written() -> None:
    for wake in (Wake(requested_at=1_800_000_000.5, held=3, by="activator-0"),
                 Wake(requested_at=1.0, held=1, served_at=2.0, waited_s=1.0),
                 Wake(requested_at=1.0, held=7, timed_out_at=301.0)):
        assert parse_wake(wake.to_annotation()) == wake


@pytest.mark.parametrize("text", [
    None, "", "not json", "[]", "7", "null", '{"held": 3}', '{"requestedAt": "yesterday"}',
    '{"requestedAt": -5}', '{"requestedAt": NaN}', '{"requestedAt": Infinity}',
    '{"requestedAt": true}', "[" * 100_000,
], ids=lambda t: repr(t)[:30])
def test_what_is_not_a_wake_is_none(text: str | None) -> None:
    assert parse_wake(text) is None


def test_odd_fields_of_a_wake_fall_back_rather_than_fail() -> None:
    wake = parse_wake(json.dumps({"requestedAt": 10, "held": -4, "servedAt": "soon",
                                  "waitedSeconds": None, "by": "x" * 1000}))
    assert wake == Wake(requested_at=10.0, held=1, by="x" * 253)


@pytest.mark.parametrize("field", ["requestedAt", "servedAt", "waitedSeconds", "timedOutAt"])
def test_an_integer_beyond_any_float_in_a_wake_is_ignored(field: str) -> None:
    doc = {"requestedAt": 10, field: 10**400}
    wake = parse_wake(json.dumps(doc))
    if field == "requestedAt":
        assert wake is None
    else:
        assert wake is not None and wake.requested_at == 10.0


@given(st.dictionaries(st.sampled_from(["requestedAt", "held", "servedAt", "waitedSeconds",
                                        "timedOutAt", "by", "other"]),
                       st.one_of(st.none(), st.booleans(), st.integers(),
                                 st.floats(allow_nan=True), st.text(max_size=5))))
def test_any_json_object_parses_to_a_wake_or_none(doc: dict[str, Any]) -> None:
    wake = parse_wake(json.dumps(doc))
    assert wake is None or (wake.requested_at >= 0 and wake.held >= 1)


def test_an_activator_slice_gives_its_ready_addresses_on_the_http_port() -> None:
    body = {"addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9090}, {"name": "http", "port": 8012}],
            "endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": True}},
                          {"addresses": ["10.0.0.3"], "conditions": {"ready": False}},
                          {"addresses": ["10.0.0.1"]},  # unset: ready (the API's rule)
                          "garbage"]}
    assert activator_slice_endpoints(body) == ActivatorEndpoints(("10.0.0.1", "10.0.0.2"),
                                                                 8012)
    assert activator_slice_endpoints({"ports": [{"name": "grpc", "port": 1}]}) is None
    assert activator_slice_endpoints("not a slice") is None
