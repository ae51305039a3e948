"""The operator's own Prometheus metrics, one home for their names and labels.

Served by ``slo-operator run --metrics-port`` (the chart's ``metrics`` Service). Reconcile
and decision code increments them; a standby replica serves them too, with its counters
still, so ``slo_operator_peering_active`` says which replica acts.
"""

from __future__ import annotations

import logging

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import start_http_server as _start_http_server

# Where a PromQL round trip lands: local Prometheus answers in milliseconds, a loaded one in
# seconds; above 10 s the loop's period is at risk.
QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class OperatorMetrics:
    """Every metric the operator exports, registered in one registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.reconciles = Counter(
            "slo_operator_reconciles", "Reconciles finished, by kind and result (ok, error).",
            ["kind", "result"], registry=registry)
        self.reconcile_duration = Histogram(
            "slo_operator_reconcile_duration_seconds", "Time one reconcile took, by kind.",
            ["kind"], buckets=RECONCILE_BUCKETS, registry=registry)
        self.errors = Counter(
            "slo_operator_errors", "Errors by kind and reason (condition reason or exception).",
            ["kind", "reason"], registry=registry)
        self.decisions = Counter(
            "slo_operator_decisions",
            "Decisions applied, by direction (scale_up, scale_down, batch_up, batch_down, hold) "
            "and reason.", ["direction", "reason"], registry=registry)
        self.pending = Gauge(
            "slo_operator_pending_work",
            "Objects waiting for a reconcile (retries and changes not yet handled).",
            registry=registry)
        self.query_duration = Histogram(
            "slo_operator_prometheus_query_duration_seconds",
            "PromQL round trip per signal query.", ["signal"], buckets=QUERY_BUCKETS,
            registry=registry)
        self.query_errors = Counter(
            "slo_operator_prometheus_query_errors",
            "PromQL queries that failed (timeout, HTTP error, bad reply), per signal.",
            ["signal"], registry=registry)
        self.peering_active = Gauge(
            "slo_operator_peering_active",
            "1 while this replica acts, 0 while it stands by for a peer of higher priority.",
            registry=registry)
        self.managed = Gauge(
            "slo_operator_managed_services", "InferenceServices seen in the last pass.",
            registry=registry)


METRICS = OperatorMetrics()


class _PeeringStateHandler(logging.Handler):
    """Mirror kopf's pause/resume (logged by its peering engine, not exposed) in a gauge."""

    def __init__(self, gauge: Gauge) -> None:
        super().__init__(level=logging.INFO)
        self.gauge = gauge

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("Resuming operations"):
            self.gauge.set(1)
        elif msg.startswith(("Pausing operations", "Pausing all operators")):
            self.gauge.set(0)


PEERING_LOGGER = "kopf._core.engines.peering"


def track_peering(peering: bool, metrics: OperatorMetrics = METRICS) -> None:
    """Start the gauge at standby when peering (kopf starts paused until peers are seen)."""
    metrics.peering_active.set(0 if peering else 1)
    if peering:
        logging.getLogger(PEERING_LOGGER).addHandler(_PeeringStateHandler(metrics.peering_active))


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve /metrics on a background thread (never on the kopf event loop)."""
    _start_http_server(port, addr=addr)
