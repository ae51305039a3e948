"""One rule for (min, max) replicas, used by the first reconcile and by the loop."""

from __future__ import annotations

import pytest

from slo_operator.api.models import InferenceServiceSpec, ReplicaBounds, SLOPolicySpec
from slo_operator.control import policy_for, replica_bounds
from slo_operator.reconcile.desired import initial_replicas


def policy(lo: int, hi: int) -> SLOPolicySpec:
    return SLOPolicySpec.model_validate({"scaling": {"minReplicas": lo, "maxReplicas": hi}})


@pytest.mark.parametrize(
    ("pol", "bounds", "want"),
    [
        pytest.param((1, 8), None, (1, 8), id="no-service-bounds-policy-range"),
        pytest.param((1, 8), ReplicaBounds(min=2, max=4), (2, 4), id="service-narrows-both"),
        pytest.param((1, 8), ReplicaBounds(max=20), (1, 8), id="service-cannot-widen-max"),
        pytest.param((3, 8), ReplicaBounds(min=1), (3, 8), id="service-cannot-lower-min"),
        pytest.param((1, 3), ReplicaBounds(min=5), (3, 3), id="min-above-policy-max-cap-wins"),
    ],
)
def test_replica_bounds(
    pol: tuple[int, int], bounds: ReplicaBounds | None, want: tuple[int, int]
) -> None:
    spec = policy(*pol)
    assert replica_bounds(spec, bounds) == want
    cp = policy_for(spec, bounds)
    assert (cp.min_replicas, cp.max_replicas) == want
    svc = InferenceServiceSpec.model_validate(
        {"model": {"name": "m", "sizeBillions": 8},
         "replicas": (bounds or ReplicaBounds()).model_dump(exclude_none=True)}
    )
    assert initial_replicas(svc, spec) == want
