"""Status of an InferenceService computed from observations (pure).

Conditions and the Events that announce them are chosen here, from values passed in;
``service`` only moves the results to the Kubernetes adapter. So is the rule that says
when a new status is worth a write (:func:`status_write`): only when something a reader
uses changed, or at the :data:`HEARTBEAT_S` heartbeat; docs/status-and-events.md explains it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from slo_operator.api import conditions as C
from slo_operator.api.cluster import DeploymentObs, PodObs
from slo_operator.api.conditions import Cond, epoch_seconds, rfc3339
from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import (
    Condition,
    DecisionRecord,
    EngineObserved,
    ObservedStatus,
    SLOPolicySpec,
)
from slo_operator.api.observe import MetricsState, Signals
from slo_operator.control import reasons as R
from slo_operator.reconcile.tenancy import Tenancy
from slo_operator.slo.evaluate import Outcome, Verdict

__all__ = [
    "AT_REST",
    "HEARTBEAT_S",
    "DeploymentObs",
    "EventSpec",
    "PodObs",
    "SLOUpdate",
    "action_events",
    "append_decision",
    "choose_events",
    "hardware_condition",
    "heartbeat_due",
    "metrics_condition",
    "observed_status",
    "policy_condition",
    "problem_conditions",
    "rollout_conditions",
    "scaling_condition",
    "slo_condition",
    "status_write",
    "written_at",
]


def rollout_conditions(
    desired: int,
    dep: DeploymentObs | None,
    pods: Sequence[PodObs],
    gpu_resource: str,
) -> list[Cond]:
    """Ready and Progressing for a service whose objects were applied."""
    stuck = [p for p in pods if p.unschedulable]
    if desired == 0:
        return [
            Cond(C.READY, True, C.SCALED_TO_ZERO, "Scaled to zero replicas"),
            Cond(C.PROGRESSING, False, C.RECONCILED, "Nothing to roll out"),
        ]
    ready = dep.ready_replicas if dep else 0
    if stuck:
        short_gpu = any(f"Insufficient {gpu_resource}" in p.message for p in stuck)
        reason = C.INSUFFICIENT_GPUS if short_gpu else C.PODS_PENDING
        first = stuck[0]
        msg = (
            f"{len(stuck)} of {desired} replicas cannot be scheduled"
            + (f" (not enough {gpu_resource})" if short_gpu else "")
            + f"; pod {first.name}: {first.message}"
        )
        return [
            Cond(C.READY, ready >= desired, reason, f"{ready}/{desired} replicas ready; {msg}"),
            Cond(C.PROGRESSING, False, reason, msg),
        ]
    rolling = dep is None or dep.observed_generation < dep.generation or (
        dep.updated_replicas < desired
    )
    if ready >= desired and not rolling:
        return [
            Cond(C.READY, True, C.AVAILABLE, f"{ready}/{desired} replicas ready"),
            Cond(C.PROGRESSING, False, C.RECONCILED, "Rollout complete"),
        ]
    return [
        Cond(C.READY, ready >= desired, C.NOT_READY if ready < desired else C.AVAILABLE,
             f"{ready}/{desired} replicas ready"),
        Cond(C.PROGRESSING, True, C.ROLLING_OUT, f"Rolling out: {ready}/{desired} replicas ready"),
    ]


def policy_condition(
    namespace: str, ref: str | None, body: Mapping[str, Any] | None,
    tenancy: Tenancy | None = None,
) -> tuple[SLOPolicySpec | None, Cond]:
    """The policy a service runs under and its PolicyBound condition.

    ``ref`` is spec.sloPolicyRef.name (None: defaults); ``body`` the SLOPolicy as cached;
    ``tenancy``: the Tenants, which may refuse the policy its tenant (None: no Tenants).
    """
    if ref is None:
        claim = (tenancy or Tenancy()).claim(namespace, None)
        if claim.refused:
            return None, Cond(C.POLICY_BOUND, False, C.POLICY_TENANT_REFUSED,
                              f"No spec.sloPolicyRef, and the defaults' tenant is refused: "
                              f"{claim.message}")
        return SLOPolicySpec(), Cond(
            C.POLICY_BOUND, True, C.DEFAULT_POLICY, "No spec.sloPolicyRef; using defaults"
        )
    if body is None:
        return None, Cond(
            C.POLICY_BOUND, False, C.POLICY_NOT_FOUND,
            f"SLOPolicy {namespace}/{ref} named in spec.sloPolicyRef.name does not exist",
        )
    try:
        policy = SLOPolicySpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        return None, Cond(
            C.POLICY_BOUND, False, C.POLICY_INVALID,
            f"SLOPolicy {namespace}/{ref} is invalid: {summarize(field_problems(err))}",
        )
    claim = (tenancy or Tenancy()).claim(namespace, policy.tenant)
    if claim.refused:
        return None, Cond(C.POLICY_BOUND, False, C.POLICY_TENANT_REFUSED,
                          f"SLOPolicy {namespace}/{ref} is refused its tenant: {claim.message}")
    return policy, Cond(C.POLICY_BOUND, True, C.POLICY_RESOLVED, f"Bound to SLOPolicy {ref}")


def problem_conditions(reason: str, field: str, message: str) -> list[Cond]:
    """HardwareResolved and Ready for a service that cannot be planned.

    An engine problem means the hardware was found but the model does not run on it.
    """
    msg = f"{field}: {message}"
    if reason == C.ENGINE_INFEASIBLE:
        hw = Cond(C.HARDWARE_RESOLVED, True, C.HARDWARE_FOUND, "GPU pools found")
    else:
        hw = Cond(C.HARDWARE_RESOLVED, False, reason, msg)
    return [hw, Cond(C.READY, False, reason, msg)]


def hardware_condition(
    known: bool, unknown_message: str, product: str, nodes: int, gpus_per_node: int,
    engine_summary: str,
) -> Cond:
    """HardwareResolved for a planned service; unknown products run conservative settings."""
    prefix = "" if known else f"{unknown_message}; conservative settings: "
    return Cond(
        C.HARDWARE_RESOLVED, True, C.HARDWARE_FOUND if known else C.UNKNOWN_GPU,
        f"{prefix}{product} pool ({nodes} nodes, {gpus_per_node} GPUs each): {engine_summary}",
    )


@dataclass(frozen=True)
class EventSpec:
    """One core/v1 Event to post: ``type`` is Normal or Warning."""

    type: str
    reason: str
    message: str


# ScalingLimited reasons that leave the service more replicas than its load needs (resting
# at minReplicas, a scale-down taken one step at a time): a bound holds, but nothing is
# wrong, so their transitions post Normal Events. The others (maxReplicas, the scale-up
# step, the GPU budget, no free GPUs, Pending pods, an unreachable target) are Warnings.
AT_REST = frozenset({R.TOO_FEW_REPLICAS, R.SCALE_DOWN_LIMIT})


def choose_events(changed: Sequence[Condition]) -> list[EventSpec]:
    """Events for condition transitions: Warning for problems, Normal for the states a user
    watches (Ready, HardwareResolved, SLOCompliant, MetricsAvailable, ScalingLimited);
    bookkeeping conditions (Progressing, SpecValid and PolicyBound when True) post none.
    ScalingLimited for a bound that only keeps more replicas than needed (:data:`AT_REST`)
    is Normal."""
    out = []
    for c in changed:
        at_rest = c.type == C.SCALING_LIMITED and c.reason in AT_REST
        warn = (c.type in C.WARN_WHEN_FALSE and c.status == "False") or (
            c.type in C.WARN_WHEN_TRUE and c.status == "True" and not at_rest
        ) or c.reason in C.WARNING_REASONS
        if warn:
            out.append(EventSpec("Warning", c.reason, c.message))
        elif c.type in C.NORMAL_EVENT_TYPES:
            out.append(EventSpec("Normal", c.reason, c.message))
    return out


# ---------------------------------------------------------------- the SLO loop's status


_METRICS = {
    MetricsState.OK: (True, C.METRICS_OK),
    MetricsState.NO_TRAFFIC: (True, C.NO_TRAFFIC),
    MetricsState.PARTIAL: (False, C.METRICS_PARTIAL),
    MetricsState.EMPTY: (False, C.METRICS_EMPTY),
    MetricsState.STALE: (False, C.METRICS_STALE),
    MetricsState.UNAVAILABLE: (False, C.METRICS_UNAVAILABLE),
}


def metrics_condition(signals: Signals, held: bool, at_zero: bool = False) -> Cond:
    """MetricsAvailable from the signals' typed state; ``held`` says the loop kept the last
    good decision because of it (the message says so). ``at_zero``: the service is at zero
    replicas (scale to zero), where no series is what is expected, not a problem."""
    if at_zero and signals.state == MetricsState.EMPTY:
        return Cond(C.METRICS_AVAILABLE, True, C.NO_TRAFFIC,
                    "no replica at zero, so no series; the activator wakes the service on "
                    "its next request")
    ok, reason = _METRICS[signals.state]
    msg = signals.message or f"metrics {signals.state.value}"
    if not ok and held:
        msg += "; holding the last good replicas and batch limit"
    return Cond(C.METRICS_AVAILABLE, ok, reason, msg)


def slo_condition(verdict: Verdict) -> Cond:
    """SLOCompliant from one window's verdict: Unknown while it cannot be judged."""
    if verdict.outcome == Outcome.GOOD:
        return Cond(C.SLO_COMPLIANT, True, C.SLO_MET, verdict.message)
    if verdict.outcome == Outcome.BAD:
        return Cond(C.SLO_COMPLIANT, False, C.SLO_MISSED, verdict.message)
    return Cond(C.SLO_COMPLIANT, None, C.AWAITING_METRICS, verdict.message or "no verdict")


def scaling_condition(reason: str | None, message: str) -> Cond:
    """ScalingLimited: True with the limiting reason (bounds, budget, GPUs, priority)."""
    if reason is None:
        return Cond(C.SCALING_LIMITED, False, C.WITHIN_BOUNDS, "The decision was not clipped")
    return Cond(C.SCALING_LIMITED, True, reason, message)


def observed_status(signals: Signals, now: datetime) -> ObservedStatus:
    """The signals shown in status, rounded to three significant digits (whether they are
    worth a write is :func:`status_write`'s business)."""
    return ObservedStatus.model_validate({
        "e2eMs": _round(signals.e2e_ms),
        "ttftMs": _round(signals.ttft_ms),
        "interTokenMs": _round(signals.itl_ms),
        "throughputCV": _round(signals.jitter),
        "requestRate": _round(signals.request_rate),
        "queue": _round(signals.waiting),
        "running": _round(signals.running),
        "kvCacheUsage": _round(signals.kv_usage),
        "state": signals.state.value,
        "time": rfc3339(now),
    })


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.3g}")


def append_decision(history: Sequence[DecisionRecord], record: DecisionRecord,
                    keep: int = 10) -> list[DecisionRecord]:
    """The last ``keep`` decisions; a record repeating the newest one's replicas, limit and
    reason is not added again (status then changes only when a decision does)."""
    if history:
        last = history[-1]
        if (last.replicas, last.batch_limit, last.reason) == (
                record.replicas, record.batch_limit, record.reason):
            return list(history)
    return [*history, record][-keep:]


@dataclass(frozen=True)
class SLOUpdate:
    """What one pass of the SLO loop decided for one service; ``reconcile`` applies it."""

    replicas: int
    batch_limit: int
    reason: str
    message: str
    conds: tuple[Cond, ...] = ()
    observed: ObservedStatus | None = None
    control: Mapping[str, Any] | None = None
    slo_compliant: bool | None = None
    attainment: float | None = None
    error_budget_remaining: float | None = None
    # Whether ``control`` (the loop's memory) differs from the written one in something a
    # later pass reads, not only in what time alone moves (``loop.same_memory``); when it
    # does, the status is written even if nothing a user reads changed.
    memory_changed: bool = True
    # What each variant's pods report they run (``status.variants[].engineObserved``, by
    # variant id; ``slo.engine_info``): None when the pass could not read it (the engine
    # query failed), so the written observation stands; the EngineMismatch condition that
    # goes with it is in ``conds``.
    engine: Mapping[str, EngineObserved] | None = None


def action_events(old_replicas: int | None, new_replicas: int, old_limit: int | None,
                  new_limit: int, why: str) -> list[EventSpec]:
    """Normal Events for a scale action and a batch-limit change (none on first setting)."""
    out = []
    if old_replicas is not None and old_replicas != new_replicas:
        out.append(EventSpec("Normal", C.SCALED,
                             f"Scaled from {old_replicas} to {new_replicas} replicas: {why}"))
    if old_limit is not None and old_limit != new_limit:
        out.append(EventSpec("Normal", C.BATCH_LIMIT_CHANGED,
                             f"Batch limit changed from {old_limit} to {new_limit}: {why}"))
    return out


# ---------------------------------------------------------------- when status is written

# The longest a service's status goes unwritten while the SLO loop runs: when nothing a
# reader uses changed, this heartbeat still refreshes ``observed`` (its ``time`` says how
# fresh the signals are) and the loop's memory at least this often. Five minutes: small
# enough that a reader never looks at signals older than a few minutes and that a memory
# read back after a restart is at most that old, large enough that an idle fleet of 1,000
# services costs the API server about 3 status writes a second instead of 50 (a 20 s pass).
HEARTBEAT_S = 300.0
# A signal in ``observed`` counts as moved when it differs from the written value by more
# than this share of it and by more than its floor: noise around a steady value never
# rewrites status, a real move (a load 10 % higher, a P99 that doubled) does at once.
OBSERVED_SHARE = 0.1
OBSERVED_FLOOR = {"e2eMs": 1.0, "ttftMs": 1.0, "interTokenMs": 0.5, "throughputCV": 0.02,
                  "requestRate": 0.05, "queue": 1.0, "running": 1.0, "kvCacheUsage": 0.05}
# Attainment and error budget count as moved from a tenth of a point (0.001).
FRACTION_STEP = 0.001
# Conditions whose messages quote the pass's measurements ("e2e 412ms > 400ms"): compared
# with their numbers masked, so a message that only re-quotes a jittering value waits for
# the next write; a change of status, reason or words is written at once.
MEASURED_CONDITIONS = frozenset({C.SLO_COMPLIANT, C.METRICS_AVAILABLE, C.SCALING_LIMITED})
_NUMBER = re.compile(r"(?<![\w.-])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# Compared apart (with tolerances, masks or the memory flag); the rest of status exactly.
_APART = ("observed", "control", "attainment", "errorBudgetRemaining", "conditions")


def written_at(stamp: str | None) -> float | None:
    """``observed.time`` (when the SLO loop last wrote the status, whole seconds) in
    seconds since the epoch; None before its first write."""
    return epoch_seconds(stamp)


def heartbeat_due(stamp: str | None, now: float) -> bool:
    """Whether the loop's status, written at ``observed.time`` ``stamp``, is
    :data:`HEARTBEAT_S` old (or was never written)."""
    t = written_at(stamp)
    return t is None or now - t >= HEARTBEAT_S


def status_write(old: Mapping[str, Any], new: Mapping[str, Any], now: datetime,
                 loop: bool = False, memory_changed: bool = False) -> str | None:
    """Why ``new`` must replace the written status ``old`` (wire forms), or None when the
    written one still tells every reader the truth. The reason names what moved: a status
    key (``desiredReplicas``, ``lastDecisions``, ...), ``condition:<type>``, ``observed``,
    ``attainment``, ``errorBudgetRemaining``, ``memory`` or ``heartbeat`` (the operator
    counts writes by it: ``slo_operator_status_writes_total``).

    Written at once: any change of the decision (replicas, batch limit, ``lastDecisions``),
    the conditions (status, reason, message; numbers masked in :data:`MEASURED_CONDITIONS`),
    ``sloCompliant``, hardware, engine, variants, placement or generation; a signal of
    ``observed`` or its state beyond :data:`OBSERVED_SHARE` and its floor; attainment or
    error budget beyond :data:`FRACTION_STEP`; the loop's memory when ``memory_changed``.
    Per-pass times (``observed.time``, the memory's own stamps) never count by themselves.
    ``loop``: ``new`` comes from an SLO pass, which also writes at the heartbeat.
    """
    for key in sorted((set(old) | set(new)) - set(_APART)):
        if old.get(key) != new.get(key):
            return key
    was, now_conds = _conditions(old), _conditions(new)
    if was != now_conds:
        moved = sorted({c[0] for c in set(was) ^ set(now_conds)})
        return f"condition:{moved[0]}" if moved else "conditions"
    if _moved_signals(old.get("observed"), new.get("observed")):
        return "observed"
    for key in ("attainment", "errorBudgetRemaining"):
        a, b = old.get(key), new.get(key)
        if (a is None) != (b is None) or (a is not None and abs(b - a) >= FRACTION_STEP):
            return key
    if memory_changed or (new.get("control") is not None) != (old.get("control") is not None):
        return "memory"
    if loop and heartbeat_due((old.get("observed") or {}).get("time"), now.timestamp()):
        return "heartbeat"
    return None


def _conditions(status: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    out = []
    for c in status.get("conditions") or []:
        message = c.get("message", "")
        if c.get("type") in MEASURED_CONDITIONS:
            message = _NUMBER.sub("#", message)
        out.append((c.get("type"), c.get("status"), c.get("reason"), message,
                    c.get("lastTransitionTime"), c.get("observedGeneration")))
    return out


def _moved_signals(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    if old is None or new is None:
        return (old is None) != (new is None)
    if old.get("state") != new.get("state"):
        return True
    for key, floor in OBSERVED_FLOOR.items():
        a, b = old.get(key), new.get(key)
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and not (
                math.isclose(a, b, rel_tol=OBSERVED_SHARE, abs_tol=floor)):
            return True
    return False
