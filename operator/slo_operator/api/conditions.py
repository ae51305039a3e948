"""Condition types and reasons as documented constants, and the pure merge rule.

``lastTransitionTime`` moves only when a condition's status flips, as in Cluster API and
Kueue, so ``kubectl describe`` tells how long a state has held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from slo_operator.api.models import Condition

# Types
READY = "Ready"
PROGRESSING = "Progressing"
HARDWARE_RESOLVED = "HardwareResolved"
SLO_COMPLIANT = "SLOCompliant"
METRICS_AVAILABLE = "MetricsAvailable"
SCALING_LIMITED = "ScalingLimited"
SPEC_VALID = "SpecValid"
POLICY_BOUND = "PolicyBound"

# Reasons
INVALID_SPEC = "InvalidSpec"
POLICY_NOT_FOUND = "PolicyNotFound"
POLICY_INVALID = "PolicyInvalid"
POLICY_RESOLVED = "PolicyResolved"
DEFAULT_POLICY = "DefaultPolicy"
NO_MATCHING_NODES = "NoMatchingNodes"
HARDWARE_FOUND = "HardwareFound"
UNKNOWN_GPU = "UnknownGPUProduct"
ENGINE_INFEASIBLE = "EngineInfeasible"
ENGINE_PLANNED = "EnginePlanned"
AVAILABLE = "Available"
ROLLING_OUT = "RollingOut"
PODS_PENDING = "PodsPending"
INSUFFICIENT_GPUS = "InsufficientGPUs"
NOT_READY = "ReplicasNotReady"
SCALED_TO_ZERO = "ScaledToZero"
NO_METRICS = "NoMetrics"
AWAITING_METRICS = "AwaitingMetrics"
RECONCILED = "Reconciled"
VALID = "Valid"


@dataclass(frozen=True)
class Cond:
    type: str
    status: bool | None
    reason: str
    message: str = ""

    @property
    def status_str(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def rfc3339(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(
    old: Sequence[Condition], new: Sequence[Cond], now: datetime, generation: int | None
) -> list[Condition]:
    """New conditions replace old ones of the same type; untouched types are kept."""
    by_type = {c.type: c for c in old}
    for c in new:
        prev = by_type.get(c.type)
        moved = prev is None or prev.status != c.status_str
        since = rfc3339(now) if prev is None or moved else prev.last_transition_time
        by_type[c.type] = Condition.model_validate(
            {
                "type": c.type,
                "status": c.status_str,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
                "observedGeneration": generation,
            }
        )
    return sorted(by_type.values(), key=_order)


_ORDER = [READY, PROGRESSING, SPEC_VALID, POLICY_BOUND, HARDWARE_RESOLVED, SLO_COMPLIANT,
          METRICS_AVAILABLE, SCALING_LIMITED]


def _order(c: Condition) -> tuple[int, str]:
    return (_ORDER.index(c.type) if c.type in _ORDER else len(_ORDER), c.type)


def transitions(old: Sequence[Condition], new: Sequence[Condition]) -> list[Condition]:
    """Conditions whose status or reason changed: what deserves an Event."""
    before = {c.type: (c.status, c.reason) for c in old}
    return [c for c in new if before.get(c.type) != (c.status, c.reason)]
