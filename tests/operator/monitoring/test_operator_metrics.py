"""The operator's own metrics, the peering gauge included."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, generate_latest

from slo_operator.monitoring import operator_metrics as metrics


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
