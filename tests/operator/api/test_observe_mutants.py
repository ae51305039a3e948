"""The observed values every layer shares (api.observe): wire names, defaults, serving count."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from typing import get_type_hints

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
    assert [s.value for s in MetricsState] == [
        "OK", "NoTraffic", "Partial", "Empty", "Stale", "Unavailable"]
    assert [s.name for s in MetricsState] == [
        "OK", "NO_TRAFFIC", "PARTIAL", "EMPTY", "STALE", "UNAVAILABLE"]
    assert f"{MetricsState.NO_TRAFFIC}" == "NoTraffic"


def test_a_service_key_prints_as_namespace_slash_name() -> None:
    assert str(ServiceKey("team-a", "chat")) == "team-a/chat"


def test_signals_default_to_nothing_observed() -> None:
    s = Signals()
    assert s.state is MetricsState.EMPTY
    assert s.message == "" and s.latency_source == ""
    unobserved = {f.name: getattr(s, f.name) for f in fields(s)
                  if f.name not in ("state", "message", "latency_source")}
    assert len(unobserved) == 13
    assert unobserved == dict.fromkeys(unobserved)


def test_replica_counts_default_to_zero() -> None:
    assert ReplicaCounts() == ReplicaCounts(0, 0, 0, 0, 0)
    assert [getattr(ReplicaCounts(), f.name) for f in fields(ReplicaCounts)] == [0] * 5


@pytest.mark.parametrize(("ready", "warming", "want"), [
    (3, 1, 2), (2, 2, 0), (1, 3, 0), (4, 0, 4), (0, 0, 0)])
def test_serving_is_ready_minus_warming_never_negative(ready: int, warming: int,
                                                       want: int) -> None:
    assert ReplicaCounts(ready=ready, warming=warming).serving == want


def test_observation_defaults() -> None:
    obs = Observation(ServiceKey("ns", "svc"), 10.0, Signals(), ReplicaCounts(), 8, 16)
    assert obs.hardware == ""
    assert obs.precision == "bf16"
    assert obs.gpus_per_replica == 1
    assert obs.max_num_batched_tokens is None
    assert obs.model_size_b is None
    assert obs.labels == {}
    other = Observation(ServiceKey("ns", "svc"), 10.0, Signals(), ReplicaCounts(), 8, 16)
    assert obs.labels is not other.labels


@pytest.mark.parametrize("value", [
    ServiceKey("ns", "svc"), Signals(), ReplicaCounts(),
    Observation(ServiceKey("ns", "svc"), 1.0, Signals(), ReplicaCounts(), 8, 16)])
def test_observed_values_are_immutable(value: object) -> None:
    with pytest.raises(FrozenInstanceError):
        value.now = 2.0  # type: ignore[attr-defined]


def test_a_service_key_is_a_dict_key() -> None:
    assert {ServiceKey("ns", "a"): 1}[ServiceKey("ns", "a")] == 1


def test_unobserved_fields_are_typed_optional() -> None:
    """The declared types resolve (typing.get_type_hints), optional where None means
    not observed."""
    hints = get_type_hints(Signals)
    optional = {name for name, hint in hints.items() if hint in (float | None, int | None)}
    assert optional == {f.name for f in fields(Signals)} - {"state", "message", "latency_source"}
    assert hints["pods"] == int | None
    obs = get_type_hints(Observation)
    assert (obs["max_num_batched_tokens"], obs["model_size_b"]) == (int | None, float | None)
