"""Peering arguments for kopf: one replica acts, the earliest started."""

from __future__ import annotations

from slo_operator.handlers import peering


def test_earlier_start_has_higher_priority_to_the_millisecond() -> None:
    first, second = peering.priority_from_start(1_700_000_000.000), peering.priority_from_start(
        1_700_000_000.001)
    assert first > second


def test_without_a_peering_name_the_operator_runs_standalone() -> None:
    assert peering.run_kwargs(None, None, 15, 0.0) == {"standalone": True}


def test_peering_name_sets_priority_from_start_and_lifetime() -> None:
    kw = peering.run_kwargs("slo-operator", None, 7, 1000.0)
    assert kw["standalone"] is False and kw["peering_name"] == "slo-operator"
    assert kw["priority"] == -1_000_000
    assert kw["settings"].peering.lifetime == 7
    assert peering.run_kwargs("p", 42, 7, 1000.0)["priority"] == 42
