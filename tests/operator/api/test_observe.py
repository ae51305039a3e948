"""The observed values every layer shares (api.observe): wire names, keys, serving count."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)


def test_metrics_states_are_the_documented_status_values() -> None:
    # status.observed.state shows these strings (see ObservedStatus.state's description).
    assert {s.name: s.value for s in MetricsState} == {
        "OK": "OK", "NO_TRAFFIC": "NoTraffic", "PARTIAL": "Partial", "EMPTY": "Empty",
        "STALE": "Stale", "UNAVAILABLE": "Unavailable"}
    assert f"{MetricsState.NO_TRAFFIC}" == "NoTraffic"


def test_a_service_key_prints_as_namespace_slash_name() -> None:
    assert str(ServiceKey("team-a", "chat")) == "team-a/chat"


def test_a_service_key_is_a_dict_key() -> None:
    assert {ServiceKey("ns", "a"): 1}[ServiceKey("ns", "a")] == 1


@pytest.mark.parametrize(("ready", "warming", "want_serving"), [
    pytest.param(3, 1, 2, id="some-warming"),
    pytest.param(2, 2, 0, id="all-warming"),
    pytest.param(1, 3, 0, id="more-warming-than-ready-is-zero"),
    pytest.param(4, 0, 4, id="none-warming"),
    pytest.param(0, 0, 0, id="none-ready"),
])
def test_serving_is_ready_minus_warming_never_negative(ready: int, warming: int,
                                                       want_serving: int) -> None:
    assert ReplicaCounts(ready=ready, warming=warming).serving == want_serving


@pytest.mark.parametrize("value", [
    pytest.param(ServiceKey("ns", "svc"), id="service-key"),
    pytest.param(Signals(), id="signals"),
    pytest.param(ReplicaCounts(), id="replica-counts"),
    pytest.param(Observation(ServiceKey("ns", "svc"), 1.0, Signals(), ReplicaCounts(), 8, 16),
                 id="observation"),
])
def test_observed_values_are_immutable(value: object) -> None:
    with pytest.raises(FrozenInstanceError):
        value.now = 2.0  # type: ignore[attr-defined]
