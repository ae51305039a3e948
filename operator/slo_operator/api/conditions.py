"""Condition types and reasons as documented constants, and the pure merge rule.

``lastTransitionTime`` moves only when a condition's status flips, as in Cluster API and
Kueue, so ``kubectl describe`` tells how long a state has held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from slo_operator.api.models import Condition

# ---------------------------------------------------------------- condition types
# Each type below is set by the reconciler or the SLO loop; docs/status-and-events.md
# lists the same table for users.

READY = "Ready"  # True when the desired replicas are ready; False says what blocks them
PROGRESSING = "Progressing"  # True while a rollout (new template or scale) is under way
HARDWARE_RESOLVED = "HardwareResolved"  # a GPU pool and engine settings were chosen
SLO_COMPLIANT = "SLOCompliant"  # the last window met every objective (Unknown: no data)
METRICS_AVAILABLE = "MetricsAvailable"  # Prometheus answered with usable signals
SCALING_LIMITED = "ScalingLimited"  # True when a bound (min/max, GPU budget, GPUs) held
SPEC_VALID = "SpecValid"  # the spec passed the operator's own checks
POLICY_BOUND = "PolicyBound"  # the SLOPolicy named in spec.sloPolicyRef exists and is valid
ENGINE_MISMATCH = "EngineMismatch"  # True when pods run other engine settings than planned

# ---------------------------------------------------------------- reasons
# Spec and policy
VALID = "Valid"  # SpecValid=True; SLOPolicy Ready=True
INVALID_SPEC = "InvalidSpec"  # SpecValid=False, Ready=False; the message names the field
POLICY_NOT_FOUND = "PolicyNotFound"  # PolicyBound=False, Ready=False: the named policy is absent
POLICY_INVALID = "PolicyInvalid"  # PolicyBound=False, Ready=False: the policy fails validation
POLICY_RESOLVED = "PolicyResolved"  # PolicyBound=True: bound to the named policy
DEFAULT_POLICY = "DefaultPolicy"  # PolicyBound=True: no sloPolicyRef, defaults apply
# Hardware and engine
NO_MATCHING_NODES = "NoMatchingNodes"  # HardwareResolved=False, Ready=False: no pool fits
HARDWARE_FOUND = "HardwareFound"  # HardwareResolved=True: a known GPU pool was chosen
UNKNOWN_GPU = "UnknownGPUProduct"  # HardwareResolved=True (conservative) or False (bad name)
ENGINE_INFEASIBLE = "EngineInfeasible"  # Ready=False: the model cannot run on the pool
APPLY_FAILED = "ApplyFailed"  # Ready=False: the API server refused an object (message: why)
# Rollout
AVAILABLE = "Available"  # Ready=True: every desired replica is ready
ROLLING_OUT = "RollingOut"  # Progressing=True: replicas are being created or replaced
PODS_PENDING = "PodsPending"  # Ready/Progressing: pods unschedulable for a non-GPU cause
INSUFFICIENT_GPUS = "InsufficientGPUs"  # Ready/Progressing, ScalingLimited: GPUs ran out
NOT_READY = "ReplicasNotReady"  # Ready=False: fewer ready replicas than desired
SCALED_TO_ZERO = "ScaledToZero"  # Ready=True with zero desired replicas
RECONCILED = "Reconciled"  # Progressing=False: nothing left to roll out
# SLO loop
AWAITING_METRICS = "AwaitingMetrics"  # SLOCompliant=Unknown: no latency observed yet
SLO_MET = "ObjectivesMet"  # SLOCompliant=True: the last window met every objective
SLO_MISSED = "ObjectivesMissed"  # SLOCompliant=False: the message names the missed objective
METRICS_OK = "MetricsFound"  # MetricsAvailable=True: every signal present
NO_TRAFFIC = "NoTraffic"  # MetricsAvailable=True: series exist, no request finished
METRICS_PARTIAL = "MetricsPartial"  # MetricsAvailable=False: some signals missing; held
METRICS_EMPTY = "MetricsEmpty"  # MetricsAvailable=False: no series for the service; held
METRICS_STALE = "MetricsStale"  # MetricsAvailable=False: newest sample too old; held
METRICS_UNAVAILABLE = "MetricsUnavailable"  # MetricsAvailable=False: Prometheus failed
WITHIN_BOUNDS = "WithinBounds"  # ScalingLimited=False: the decision was not clipped
# What the pods report they run (slo_runtime_engine_info) against the plan.
ENGINE_DIFFERS = "EngineDiffers"  # EngineMismatch=True: the launcher changed a setting
ENGINE_MATCHES = "EngineMatches"  # EngineMismatch=False: every reporting pod runs the plan
# EngineMismatch=False with reason RollingOut: pods still run an earlier plan's settings.
NOT_REPORTED = "NotReported"  # EngineMismatch=Unknown: no pod reports its engine settings
# ScalingLimited=True carries the limiting reason from the control law (for example
# AtMaxReplicas, AtMinReplicas, GPUBudget, InsufficientGPUs, Priority).

# Event reasons posted by the SLO loop (Normal), never condition reasons.
SCALED = "Scaled"  # the Deployment's replicas changed
BATCH_LIMIT_CHANGED = "BatchLimitChanged"  # the live in-flight limit changed on the pods
# The chunked-prefill budget (--max-num-batched-tokens) moved with the inter-token
# objective or the learnt step times: a rolling update (reconcile.chunking).
CHUNK_BUDGET_CHANGED = "ChunkBudgetChanged"
# Replicas spilled to another GPU pool, were held for a surge-first move back, or fit no
# pool (the message names pools, free GPUs and prices; Warning when some fit nowhere).
PLACED = "Placed"

# Which transitions post Events, and of which type (see reconcile.status.choose_events).
# The InferenceService's InferencePool (spec.routing.inferencePool; docs/gateway.md).
INFERENCE_POOL_READY = "InferencePoolReady"
POOL_APPLIED = "Applied"  # True: the pool is applied over every variant's pods
CRD_MISSING = "CRDMissing"  # False: the API server does not serve the kind (no CRD)
POOL_DISABLED = "Disabled"  # False: the field was turned off; the pool was deleted
# The SLOPolicy's managed PrometheusRule (--manage-alert-rules; docs/alerting.md).
ALERT_RULES_READY = "AlertRulesReady"
RULES_APPLIED = "RulesApplied"  # True: the PrometheusRule holds the policy's rules
RULES_REJECTED = "RulesRejected"  # False: 400/409/422, the API server or admission refused
FORBIDDEN = "Forbidden"  # False: 403, RBAC or an admission webhook refused
# The SLOPolicy's tenant (reconcile.tenancy; docs/reliability.md "Tenants and budgets").
TENANT_BOUND = "TenantBound"
TENANT_BOUND_BY_OBJECT = "BoundByTenant"  # True: a Tenant object binds the namespace
TENANT_UNMANAGED = "Unmanaged"  # True: no Tenant object governs it (spec.tenant or namespace)
NAMESPACE_NOT_BOUND = "NamespaceNotBound"  # False: the named Tenant does not bind it
NAMESPACE_BOUND_ELSEWHERE = "NamespaceBoundElsewhere"  # False: another Tenant binds it
TENANT_AMBIGUOUS = "TenantAmbiguous"  # False: several Tenants bind the namespace
TENANT_REQUIRED = "TenantRequired"  # False: --require-tenants, no Tenant binds it
TENANT_INVALID = "TenantInvalid"  # False: the named Tenant fails validation
# PolicyBound=False, Ready=False on a service whose policy is refused its tenant.
POLICY_TENANT_REFUSED = "PolicyTenantRefused"

# Scale to zero (the policy's scaling.scaleToZero; docs/scale-to-zero.md).
AWAKE = "Awake"
AWAKE_SERVING = "Serving"  # True: replicas serve; the service goes to zero when idle
WOKEN = "Woken"  # True: woken from zero by a request; the message says how long it waited
WAKING = "Waking"  # False: a request held by the activator woke it; no replica Ready yet
WAKE_TIMED_OUT = "WakeTimedOut"  # False: the activator answered 504: no replica in time
NO_ACTIVATOR = "NoActivator"  # True: no activator configured: never goes to zero
# Awake=False with reason ScaledToZero: zero replicas, the Service routes to the activator.

WARN_WHEN_FALSE = frozenset(
    {READY, SPEC_VALID, POLICY_BOUND, HARDWARE_RESOLVED, SLO_COMPLIANT, METRICS_AVAILABLE,
     TENANT_BOUND}
)
WARN_WHEN_TRUE = frozenset({SCALING_LIMITED, ENGINE_MISMATCH})
WARNING_REASONS = frozenset({UNKNOWN_GPU, CRD_MISSING, WAKE_TIMED_OUT, NO_ACTIVATOR})
NORMAL_EVENT_TYPES = frozenset(
    {READY, HARDWARE_RESOLVED, SLO_COMPLIANT, METRICS_AVAILABLE, SCALING_LIMITED,
     INFERENCE_POOL_READY, AWAKE}
)


@dataclass(frozen=True)
class Cond:
    """A condition as the reconciler decides it (status None means Unknown)."""

    type: str
    status: bool | None
    reason: str
    message: str = ""

    @property
    def status_str(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def rfc3339(now: datetime) -> str:
    """``now`` as an RFC 3339 UTC timestamp, second precision."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_seconds(stamp: object) -> float | None:
    """An RFC 3339 timestamp as Kubernetes and :func:`rfc3339` write it, in seconds since the
    epoch (UTC when it names no zone); None for anything else."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone(timedelta(0)))).timestamp()


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
