"""Peering arguments for kopf and the operator's own metrics."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, generate_latest

from slo_operator.handlers import peering
from slo_operator.monitoring import operator_metrics as metrics


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


def test_peering_gauge_follows_kopf_pause_and_resume() -> None:
    m = metrics.OperatorMetrics(CollectorRegistry())
    metrics.track_peering(True, m)
    log = logging.getLogger(metrics.PEERING_LOGGER)
    old_level = log.level
    log.setLevel(logging.INFO)
    try:
        assert m.peering_active._value.get() == 0  # standby until kopf resumes
        log.info("Resuming operations after the pause. Conflicting operators ... are gone.")
        assert m.peering_active._value.get() == 1
        log.info("Pausing operations in favour of [<Peer x>].")
        assert m.peering_active._value.get() == 0
    finally:
        log.setLevel(old_level)
        for h in [h for h in log.handlers if isinstance(h, metrics._PeeringStateHandler)]:
            log.removeHandler(h)


def test_standalone_replica_is_active() -> None:
    m = metrics.OperatorMetrics(CollectorRegistry())
    metrics.track_peering(False, m)
    assert m.peering_active._value.get() == 1


def test_metric_names_are_exported() -> None:
    reg = CollectorRegistry()
    m = metrics.OperatorMetrics(reg)
    m.reconciles.labels("InferenceService", "ok").inc()
    m.query_duration.labels("e2e").observe(0.02)
    text = generate_latest(reg).decode()
    for name in ("slo_operator_reconciles_total", "slo_operator_errors_total",
                 "slo_operator_decisions_total", "slo_operator_pending_work",
                 "slo_operator_prometheus_query_duration_seconds_bucket",
                 "slo_operator_peering_active"):
        assert name in text or name.removesuffix("_total") in text
