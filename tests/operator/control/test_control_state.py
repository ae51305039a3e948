"""ControlState survives a restart through the status dict, and garbage never raises."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slo_operator.api.models import ReplicaBounds, SLOPolicySpec
from slo_operator.control import ControlState, decide, policy_for
from tests.operator.control.control_support import T0, history, make_obs, make_policy


def test_state_round_trips_through_json() -> None:
    d = decide(make_obs(desired=2, rate=80.0, e2e=12_000.0), make_policy(),
               ControlState(recommendations=history(2, since=T0 - 600)), T0)
    wire = json.loads(json.dumps(d.state.to_dict()))
    back = ControlState.from_dict(wire)
    assert back.to_dict() == d.state.to_dict()
    assert back.last_good_replicas == d.replicas
    # The restarted operator decides as the running one would have.
    nxt = make_obs(desired=d.replicas, rate=80.0, e2e=12_000.0)
    a = decide(nxt, make_policy(), d.state, T0 + 15)
    b = decide(nxt, make_policy(), back, T0 + 15)
    assert (a.replicas, a.batch_limit, a.reason) == (b.replicas, b.batch_limit, b.reason)


@pytest.mark.parametrize("garbage", [
    None, 42, "x", [], {"v": "nope"},
    {"lastGood": {"replicas": -3, "limit": 0.5},
     "recommendations": [[1, 2, 3], ["a", 1], [5, 1.5]]},
    {"speed": float("nan"), "correction": 1e9, "rates": "many", "lastScale": {"direction": 7}},
], ids=["none", "int", "str", "list", "bad-version", "bad-values", "nan-and-huge"])
def test_unreadable_state_falls_back_to_defaults(garbage: Any) -> None:
    s = ControlState.from_dict(garbage)
    assert s.speed == 1.0 and s.correction == 1.0
    assert s.last_good_replicas is None and s.recommendations == ()
    assert -1 <= s.last_scale_direction <= 1


def test_policy_for_narrows_policy_with_service_bounds() -> None:
    spec = SLOPolicySpec.model_validate({
        "window": "2m",
        "scaling": {"minReplicas": 1, "maxReplicas": 10, "scaleDownStabilization": "5m"},
        "objectives": {"interTokenLatencyMs": 50},
    })
    p = policy_for(spec, ReplicaBounds(min=2, max=6))
    assert (p.min_replicas, p.max_replicas) == (2, 6)
    assert (p.window_s, p.scale_down_stabilization_s, p.itl_target_ms) == (120.0, 300.0, 50.0)
    # Bounds outside the policy's range: the tighter maximum wins, min follows it.
    q = policy_for(spec, ReplicaBounds(min=12, max=20))
    assert (q.min_replicas, q.max_replicas) == (10, 10)
