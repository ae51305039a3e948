"""What the demo records and reports, as pure functions of the objects it reads.

A :class:`Sample` is one service at one instant, taken from its InferenceService status,
its SLOPolicy's objectives and the offered load of the replayed trace. :func:`summarize`
turns the samples into the numbers the summary table and ``summary.json`` show.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from slo_operator.api import conditions as C
from slo_operator.api.models import DecisionRecord, InferenceServiceStatus, SLOPolicySpec


@dataclass(frozen=True)
class Targets:
    """A policy's objectives in the units the view shows."""

    e2e_ms: float
    e2e_percentile: float
    ttft_ms: float
    ttft_percentile: float
    jitter: float | None  # when the policy sets a jitter objective
    itl_ms: float | None = None  # inter-token latency, when the policy sets one

    @classmethod
    def from_policy(cls, spec: SLOPolicySpec) -> Targets:
        """The objectives of an SLOPolicy spec."""
        o = spec.objectives
        itl = o.inter_token_latency_ms
        return cls(float(o.e2e_latency_ms), o.e2e_percentile, float(o.ttft_ms),
                   o.ttft_percentile, o.throughput_cv_max,
                   float(itl) if itl is not None else None)


@dataclass(frozen=True)
class Decision:
    """One entry of status.lastDecisions."""

    time: str
    replicas: int
    batch_limit: int | None
    reason: str
    message: str


@dataclass(frozen=True)
class Sample:
    t: float  # wall seconds since the replay started
    service: str  # namespace/name
    gpu: str | None = None
    offered_rps: float | None = None  # requests/s the replay sent (wall clock)
    request_rate: float | None = None  # requests/s the operator observed
    replicas: int | None = None
    ready: int | None = None
    desired: int | None = None
    batch_limit: int | None = None
    e2e_ms: float | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    jitter: float | None = None
    targets: Targets | None = None
    slo_state: str = "-"  # the SLOCompliant condition's reason, "-" when absent
    slo_message: str = ""
    decisions: tuple[Decision, ...] = field(default_factory=tuple)

    @property
    def last_decision(self) -> Decision | None:
        return self.decisions[-1] if self.decisions else None


def service_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of a Kubernetes object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def policy_targets(policy: Mapping[str, Any] | None) -> Targets | None:
    """Objectives of an SLOPolicy object, defaults for a missing spec, None if invalid."""
    if policy is None:
        return None
    try:
        return Targets.from_policy(SLOPolicySpec.model_validate(policy.get("spec") or {}))
    except ValidationError:
        return None


def sample(t: float, svc: Mapping[str, Any], policy: Mapping[str, Any] | None,
           offered_rps: float | None) -> Sample:
    """One service's state at ``t`` from its InferenceService and SLOPolicy objects."""
    try:
        status = InferenceServiceStatus.model_validate(svc.get("status") or {})
    except ValidationError:
        # A status written by another version in a shape this one cannot read: show what the
        # spec says and leave the observed values empty rather than stopping the demo.
        status = InferenceServiceStatus()
    obs = status.observed
    slo = next((c for c in status.conditions if c.type == C.SLO_COMPLIANT), None)
    return Sample(
        t=t,
        service=service_key(svc),
        gpu=status.hardware.product if status.hardware else None,
        offered_rps=offered_rps,
        request_rate=obs.request_rate if obs else None,
        replicas=status.replicas,
        ready=status.ready_replicas,
        desired=status.desired_replicas,
        batch_limit=status.batch_limit,
        e2e_ms=obs.e2e_ms if obs else None,
        ttft_ms=obs.ttft_ms if obs else None,
        itl_ms=obs.inter_token_ms if obs else None,
        jitter=obs.throughput_cv if obs else None,
        targets=policy_targets(policy),
        slo_state=slo.reason if slo else "-",
        slo_message=slo.message if slo else "",
        decisions=tuple(_decision(d) for d in status.last_decisions),
    )


def _decision(d: DecisionRecord) -> Decision:
    return Decision(d.time, d.replicas, d.batch_limit, d.reason, d.message)


def offered_rate(arrivals: Sequence[float], t: float, window: float) -> float:
    """Requests per second arriving in ``(t - window, t]`` (``arrivals`` sorted, seconds from
    the replay start); in the first ``window`` seconds, over the time elapsed so far."""
    if window <= 0:
        raise ValueError(f"window: must be > 0, got {window}")
    lo = bisect.bisect_right(arrivals, t - window)
    hi = bisect.bisect_right(arrivals, t)
    span = min(window, t) if t > 0 else window
    return (hi - lo) / span


def decision_history(samples: Iterable[Sample]) -> list[Decision]:
    """Every distinct decision seen in any sample's lastDecisions, oldest first.

    Status keeps only the last few decisions; sampling more often than decisions are made
    recovers them all.
    """
    seen: dict[tuple[str, int, int | None, str], Decision] = {}
    for s in samples:
        for d in s.decisions:
            seen.setdefault((d.time, d.replicas, d.batch_limit, d.reason), d)
    return sorted(seen.values(), key=lambda d: d.time)


@dataclass(frozen=True)
class ServiceSummary:
    service: str
    gpu: str | None
    samples: int
    scale_outs: int  # decisions that raised replicas
    scale_ins: int  # decisions that lowered replicas
    limit_changes: int  # decisions that moved the live batch limit
    replicas_min: int | None
    replicas_max: int | None
    replica_seconds: float  # ready replicas integrated over wall time
    batch_limit_min: int | None
    batch_limit_max: int | None
    e2e_max_ms: float | None
    ttft_max_ms: float | None
    compliant_fraction: float | None  # samples with SLOCompliant=ObjectivesMet over judged ones
    offered_requests: float  # offered load integrated over wall time
    decisions: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _changes(decisions: Sequence[Decision]) -> tuple[int, int, int]:
    outs = ins = limits = 0
    for prev, cur in itertools.pairwise(decisions):
        outs += cur.replicas > prev.replicas
        ins += cur.replicas < prev.replicas
        limits += (cur.batch_limit is not None and prev.batch_limit is not None
                   and cur.batch_limit != prev.batch_limit)
    return outs, ins, limits


def _extent(values: Iterable[float | int | None]) -> tuple[Any, Any]:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return (min(vals), max(vals)) if vals else (None, None)


def _integral(ts: Sequence[float], values: Sequence[float | int | None]) -> float:
    """Left Riemann sum of a step function sampled at ``ts`` (missing values count 0)."""
    return sum((t1 - t0) * float(v or 0) for t0, t1, v in zip(ts, ts[1:], values, strict=False))


def summarize_service(samples: Sequence[Sample]) -> ServiceSummary:
    """Counts and extents for one service's samples (sorted by time)."""
    if not samples:
        raise ValueError("samples: empty")
    decisions = decision_history(samples)
    outs, ins, limits = _changes(decisions)
    ts = [s.t for s in samples]
    judged = [s for s in samples if s.slo_state in (C.SLO_MET, C.SLO_MISSED)]
    return ServiceSummary(
        service=samples[0].service,
        gpu=next((s.gpu for s in reversed(samples) if s.gpu), None),
        samples=len(samples),
        scale_outs=outs,
        scale_ins=ins,
        limit_changes=limits,
        replicas_min=_extent(s.ready for s in samples)[0],
        replicas_max=_extent(s.ready for s in samples)[1],
        replica_seconds=_integral(ts, [s.ready for s in samples]),
        batch_limit_min=_extent(s.batch_limit for s in samples)[0],
        batch_limit_max=_extent(s.batch_limit for s in samples)[1],
        e2e_max_ms=_extent(s.e2e_ms for s in samples)[1],
        ttft_max_ms=_extent(s.ttft_ms for s in samples)[1],
        compliant_fraction=(sum(s.slo_state == C.SLO_MET for s in judged) / len(judged)
                            if judged else None),
        offered_requests=_integral(ts, [s.offered_rps for s in samples]),
        decisions=[asdict(d) for d in decisions],
    )


def by_service(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    """Samples grouped per service, each group sorted by time."""
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.service, []).append(s)
    for group in out.values():
        group.sort(key=lambda s: s.t)
    return out


def summarize(samples: Iterable[Sample]) -> list[ServiceSummary]:
    """One summary per service, in service order."""
    groups = by_service(samples)
    return [summarize_service(groups[k]) for k in sorted(groups)]
