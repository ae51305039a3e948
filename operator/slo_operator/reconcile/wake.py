"""Plan a service's scale-to-zero route, status and condition (pure).

A service whose policy allows scale to zero is routed to the activator while it has no
Ready replica (zero desired, or replicas still starting): the operator applies its
EndpointSlice (``render.objects.build_activator_route``) and deletes it once a replica
is Ready. What the activator recorded of the last wake (``api.activation.Wake``, the
InferenceService's annotation) goes into ``status.scaleToZero`` and the ``Awake``
condition, whose transitions post the Events: the service went to zero, a request woke
it, the first request waited so long, or the activator gave up on it.

Whether the route slice exists comes from the watch cache (``Snapshot.routes``), so a
slice deleted by someone else is applied again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from slo_operator.api import conditions as C
from slo_operator.api.activation import ActivatorEndpoints, Wake
from slo_operator.api.conditions import Cond, rfc3339
from slo_operator.api.models import ScaleToZeroStatus
from slo_operator.reconcile.actions import Delete
from slo_operator.render.objects import RenderInput, build_activator_route

ENDPOINT_SLICE = "EndpointSlice"


@dataclass(frozen=True)
class WakePlan:
    """The route's writes, ``status.scaleToZero`` and the ``Awake`` condition."""

    obj: dict[str, object] | None = None  # the route slice to apply
    force: bool = False  # apply even when the applied cache holds it (it is gone)
    delete: Delete | None = None
    status: ScaleToZeroStatus | None = None
    cond: Cond | None = None


def _time(ts: float) -> str:
    return rfc3339(datetime.fromtimestamp(ts, tz=UTC))


def plan_wake(render: RenderInput, *, scale_to_zero: bool, desired: int, ready: int,
              wake: Wake | None, activator: ActivatorEndpoints | None, configured: bool,
              route: str | None, old: ScaleToZeroStatus | None, now: datetime) -> WakePlan:
    """The plan for one service: ``desired`` and ``ready`` replicas now, the activator's
    last ``wake`` (annotation), the ``activator``'s endpoints (None: not seen), whether
    the operator was ``configured`` with one, the existing route slice's name (``route``)
    and the written ``old`` status."""
    gone = Delete(ENDPOINT_SLICE, render.namespace, route) if route else None
    if not scale_to_zero:
        return WakePlan(delete=gone)
    if not configured:
        return WakePlan(delete=gone, status=ScaleToZeroStatus(), cond=Cond(
            C.AWAKE, True, C.NO_ACTIVATOR,
            "spec.scaling.scaleToZero is true but the operator runs without an activator "
            "(--activator-service): the service keeps at least one replica"))
    routed = desired == 0 or ready == 0
    obj = build_activator_route(render, activator or ActivatorEndpoints()) if routed else None
    status = _status(old, desired, routed, wake, now)
    return WakePlan(obj=obj, force=routed and route is None,
                    delete=None if routed else gone, status=status,
                    cond=_condition(desired, ready, wake, status, activator))


def _status(old: ScaleToZeroStatus | None, desired: int, routed: bool, wake: Wake | None,
            now: datetime) -> ScaleToZeroStatus:
    prev = old or ScaleToZeroStatus()
    zero_since = (prev.zero_since or rfc3339(now)) if desired == 0 else None
    out = ScaleToZeroStatus(zero_since=zero_since, routed_to_activator=routed,
                            cold_starts=prev.cold_starts)
    if wake is None:
        return out
    requested = _time(wake.requested_at)
    served_before = prev.last_wake_requested == requested and \
        prev.last_wake_wait_seconds is not None
    out.last_wake_requested = requested
    out.last_wake_requests = wake.held
    if wake.waited_s is not None:
        out.last_wake_wait_seconds = round(wake.waited_s, 3)
        if not served_before:
            out.cold_starts = prev.cold_starts + 1
    if wake.timed_out_at is not None:
        out.last_wake_timed_out = _time(wake.timed_out_at)
    return out


def _condition(desired: int, ready: int, wake: Wake | None, status: ScaleToZeroStatus,
               activator: ActivatorEndpoints | None) -> Cond:
    pending = wake is not None and wake.waited_s is None
    if desired == 0:
        where = (f"the activator ({len(activator.addresses)} Ready pod(s))"
                 if activator is not None and activator.addresses else
                 "the activator, which has no Ready pod now")
        return Cond(C.AWAKE, False, C.SCALED_TO_ZERO,
                    f"zero replicas since {status.zero_since}; the Service routes to {where}, "
                    "which holds the next request and wakes the service")
    if ready == 0 and wake is not None and wake.timed_out_at is not None and pending:
        return Cond(C.AWAKE, False, C.WAKE_TIMED_OUT,
                    f"the activator held {wake.held} request(s) from "
                    f"{status.last_wake_requested} and answered 504 at "
                    f"{status.last_wake_timed_out}: no replica became Ready in time; "
                    f"{desired} replica(s) asked for")
    if ready == 0 and pending:
        assert wake is not None
        return Cond(C.AWAKE, False, C.WAKING,
                    f"{wake.held} request(s) held by the activator since "
                    f"{status.last_wake_requested} woke the service; waiting for one of "
                    f"{desired} replica(s) to be Ready")
    if ready == 0:
        return Cond(C.AWAKE, False, C.WAKING,
                    f"none of {desired} replica(s) Ready yet; the activator holds requests "
                    "until one is")
    if wake is not None and wake.waited_s is not None:
        return Cond(C.AWAKE, True, C.WOKEN,
                    f"woken from zero by a request at {status.last_wake_requested}; the "
                    f"first request waited {wake.waited_s:.1f} s (cold start)")
    return Cond(C.AWAKE, True, C.AWAKE_SERVING,
                "replicas serve; the service goes to zero after its idle period")
