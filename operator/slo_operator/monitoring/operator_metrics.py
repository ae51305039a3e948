"""The operator's own Prometheus metrics, one home for their names and labels.

Served by ``slo-operator run --metrics-port`` (the chart's ``metrics`` Service). Reconcile
and decision code increments them; a standby replica serves them too, with its counters
still, so ``slo_operator_peering_active`` says which replica acts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
        self.passes = Counter(
            "slo_operator_periodic_passes",
            "Periodic passes by result: ok, error, cancelled (kopf paused this replica "
            "mid-pass). They stay still on a standby replica.", ["result"], registry=registry)
        self.pass_writes = Counter(
            "slo_operator_periodic_writes",
            "API writes the periodic pass sent (result=sent) or refused because kopf had "
            "paused this replica (result=refused).", ["result"], registry=registry)

        self.status_writes = Counter(
            "slo_operator_status_writes",
            "InferenceService status patches sent, by what moved: a status key "
            "(desiredReplicas, lastDecisions, ...), condition:<type>, observed, attainment, "
            "errorBudgetRemaining, memory or heartbeat (docs/status-and-events.md).",
            ["reason"], registry=registry)
        self.events = Counter(
            "slo_operator_events_posted",
            "Kubernetes Events the operator posted for InferenceServices, by type "
            "(Normal, Warning) and reason.", ["type", "reason"], registry=registry)


METRICS = OperatorMetrics()


class PeeringState:
    """Whether kopf lets this replica act (peering), with listeners told of each change.

    kopf keeps its pause in a toggle local to ``kopf._core.reactor.running.spawn_tasks``
    that no handler, memo or setting exposes; its peering engine logs each transition, so
    :func:`track_peering` follows that log (see ``_PeeringStateHandler``)."""

    def __init__(self, active: bool = True) -> None:
        self.active = active
        self._listeners: list[Callable[[bool], None]] = []

    def set(self, active: bool) -> None:
        changed = active != self.active
        self.active = active
        if changed:
            for listener in list(self._listeners):
                listener(active)

    def subscribe(self, listener: Callable[[bool], None]) -> Callable[[], None]:
        """Call ``listener(active)`` on every change; returns the unsubscribe function."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return unsubscribe


# kopf 1.45 logs these lines from kopf/_core/engines/peering.py (process_peering_event,
# lines 137-151) right before it turns the peering toggle on or off, and only on an actual
# change: "Pausing operations in favour of [...]" (a live peer of higher priority),
# "Pausing all operators, including self: [...]" (peers of equal priority, a warning) and
# "Resuming operations after the pause. ..." (no such peer alive any more).
PAUSING = ("Pausing operations", "Pausing all operators")
RESUMING = ("Resuming operations",)


def peering_transition(message: str) -> bool | None:
    """True for kopf's resume line, False for a pause line, None for anything else."""
    if message.startswith(RESUMING):
        return True
    if message.startswith(PAUSING):
        return False
    return None


class _PeeringStateHandler(logging.Handler):
    """Mirror kopf's pause/resume (logged by its peering engine, not exposed) in a gauge
    and in :data:`PEERING`. kopf logs them on the event loop, in the very step that turns
    its toggle, so listeners run before any other coroutine sees the new state."""

    def __init__(self, gauge: Gauge, state: PeeringState | None = None) -> None:
        super().__init__(level=logging.INFO)
        self.gauge = gauge
        self.state = state

    def emit(self, record: logging.LogRecord) -> None:
        active = peering_transition(record.getMessage())
        if active is None:
            return
        self.gauge.set(1 if active else 0)
        if self.state is not None:
            self.state.set(active)


PEERING_LOGGER = "kopf._core.engines.peering"
# Where the operator's own pause gate (handlers.setup.Context.gate) learns kopf's state.
PEERING = PeeringState()


def track_peering(peering: bool, metrics: OperatorMetrics = METRICS,
                  state: PeeringState | None = None) -> None:
    """Start at standby when peering (kopf starts paused until it has read the peering
    object) and follow kopf's pause/resume from then on, in the gauge and in ``state``
    (default :data:`PEERING`)."""
    state = PEERING if state is None else state
    metrics.peering_active.set(0 if peering else 1)
    state.set(not peering)
    if peering:
        log = logging.getLogger(PEERING_LOGGER)
        for old in [h for h in log.handlers if isinstance(h, _PeeringStateHandler)]:
            log.removeHandler(old)
        # A logger level above INFO (kopf's loggers quietened) would drop the very records
        # the pause gate depends on before any handler sees them.
        if log.getEffectiveLevel() > logging.INFO:
            log.setLevel(logging.INFO)
        log.addHandler(_PeeringStateHandler(metrics.peering_active, state))


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve /metrics on a background thread (never on the kopf event loop)."""
    _start_http_server(port, addr=addr)
