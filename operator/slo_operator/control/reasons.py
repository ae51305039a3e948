"""Reasons a decision or a grant can carry (CamelCase, as Kubernetes condition reasons).

``Decision.reason`` says why the replicas and the batch limit are what they are;
``Decision.limited_reason`` (and ``Grant.reason``) feed the ``ScalingLimited`` condition.
docs/slo-loop.md lists each with its meaning; keep the two in step.
"""

from __future__ import annotations

from slo_operator.api.conditions import INSUFFICIENT_GPUS, PODS_PENDING, SCALED_TO_ZERO

# --- decision reasons (valid decisions) ---------------------------------------------
LOAD_INCREASED = "LoadIncreased"  # the load (or first tokens' queueing) needs more replicas
SLO_VIOLATED = "SLOViolated"  # latency over target drove the correction and a scale-out
LOAD_DECREASED = "LoadDecreased"  # the load fits in fewer replicas for a whole window
WITHIN_TOLERANCE = "WithinTolerance"  # the need is inside the dead band: nothing moves
STEADY = "Steady"  # the need equals the current replicas
STABILIZING = "Stabilizing"  # a scale-down waits for its stabilization window
REVERSAL_BLOCKED = "ReversalBlocked"  # the opposite move came too soon after the last one
WAITING_FOR_REPLICAS = "WaitingForReplicas"  # capacity already asked for is still starting
PODS_UNREPORTED = "PodsUnreported"  # a scale-in waits: Ready pods without series read as less load
# A scale-in waits: the arrival rate, or the prompt work arriving, has been rising.
LOAD_RISING = "LoadRising"
# A scale-in waits: queueing would take TTFT past target, or e2e is over the planning
# margin where the model calls the targets out of reach.
LATENCY_HEADROOM = "LatencyHeadroom"
LIMIT_LOWERED = "LimitLowered"  # in-flight limit cut: inter-token latency over target
LIMIT_RAISED = "LimitRaised"  # in-flight limit raised: queueing while replicas are not there
LIMIT_RESTORED = "LimitRestored"  # in-flight limit back toward the model's batch
LIMIT_RESIZED = "LimitResized"  # the model's batch moved with the request shape
NO_TRAFFIC = "NoTraffic"  # no request in the window: fewest replicas after stabilization
SCALED_TO_ZERO_REASON = SCALED_TO_ZERO  # idle for idleBeforeZero (scaleToZero): zero replicas
WOKEN = "Woken"  # at zero, the activator held a request: replicas asked for again

# --- no valid decision (hold the last good one) --------------------------------------
METRICS_UNAVAILABLE = "MetricsUnavailable"  # Prometheus could not be queried
METRICS_STALE = "MetricsStale"  # newest sample older than the staleness bound
METRICS_EMPTY = "MetricsEmpty"  # no series for the service (not scraped yet, or renamed)
METRICS_PARTIAL = "MetricsPartial"  # the request rate is missing: load unknown

# --- ScalingLimited reasons ------------------------------------------------------------
TOO_FEW_REPLICAS = "TooFewReplicas"  # wanted fewer than the minimum replicas
TOO_MANY_REPLICAS = "TooManyReplicas"  # wanted more than the maximum replicas
SCALE_UP_LIMIT = "ScaleUpLimit"  # scale-up capped by maxScaleUpStep
SCALE_DOWN_LIMIT = "ScaleDownLimit"  # scale-down capped by maxScaleDownStep
GPU_BUDGET = "GPUBudgetExceeded"  # the tenant's gpuBudget caps the replicas
PENDING = PODS_PENDING  # pods Pending: no further scale-up until they schedule
NO_GPUS = INSUFFICIENT_GPUS  # the GPU pool has no free GPUs for more replicas
GPUS_RECLAIMED = "GPUsReclaimed"  # replicas given up to a higher-priority service
TARGET_INFEASIBLE = "TargetInfeasible"  # latency target below what one step takes

INVALID_REASONS = frozenset({METRICS_UNAVAILABLE, METRICS_STALE, METRICS_EMPTY, METRICS_PARTIAL})
