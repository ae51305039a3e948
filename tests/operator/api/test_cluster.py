"""The cluster's own objects as the operator sees them (api.cluster): service-wide totals of
a service's Deployments, snapshot lookups, and the API server's refusals."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

import pytest

from slo_operator.api.cluster import ApiRejected, DeploymentObs, NodeInfo, PodObs, Snapshot

# ---------------------------------------------------------------- DeploymentObs.total


def test_total_of_nothing_is_none_and_of_one_is_that_one() -> None:
    assert DeploymentObs.total([]) is None
    one = DeploymentObs(replicas=3, generation=2, observed_generation=1, spec_replicas=None,
                        name="a", variant="h100")
    assert DeploymentObs.total([one]) is one
    assert one.total([]) is None  # a static method: the instance plays no part


def test_total_sums_counts_and_replicas_asked() -> None:
    a = DeploymentObs(2, 1, 2, 5, 5, spec_replicas=2, name="a", variant="x")
    b = DeploymentObs(3, 2, 1, 7, 7, spec_replicas=0, name="b", variant="y")
    assert DeploymentObs.total([a, b]) == DeploymentObs(
        replicas=5, ready_replicas=3, updated_replicas=3, generation=5, observed_generation=5,
        spec_replicas=2)


@pytest.mark.parametrize(("specs", "want_spec_replicas"), [
    pytest.param((None, 2), None, id="first-unknown"),
    pytest.param((2, None), None, id="second-unknown"),
    pytest.param((0, 0), 0, id="both-zero"),
    pytest.param((1, 4), 5, id="both-known"),
    pytest.param((0, 3), 3, id="zero-and-some"),
])
def test_total_replicas_asked_is_unknown_when_any_is(
    specs: tuple[int | None, int | None], want_spec_replicas: int | None
) -> None:
    total = DeploymentObs.total([DeploymentObs(spec_replicas=s) for s in specs])
    assert total is not None and total.spec_replicas == want_spec_replicas


def test_total_takes_generations_of_the_first_lagging_rollout() -> None:
    done = DeploymentObs(generation=3, observed_generation=3)
    lag1 = DeploymentObs(generation=5, observed_generation=4)
    lag2 = DeploymentObs(generation=9, observed_generation=1)
    total = DeploymentObs.total([done, lag1, lag2])
    assert total is not None
    assert (total.generation, total.observed_generation) == (5, 4)


def test_total_takes_generations_of_the_first_when_none_lags() -> None:
    first = DeploymentObs(generation=3, observed_generation=3)
    second = DeploymentObs(generation=8, observed_generation=8)
    ahead = DeploymentObs(generation=2, observed_generation=6)
    total = DeploymentObs.total([first, second, ahead])
    assert total is not None
    assert (total.generation, total.observed_generation) == (3, 3)


# ---------------------------------------------------------------- Snapshot


def test_an_empty_snapshot_finds_nothing() -> None:
    s = Snapshot()
    assert s.policy("ns", "p") is None
    assert s.deployment("ns", "svc") is None
    assert s.variants("ns", "svc") == {}
    assert s.pods_of("ns", "svc") == ()


def test_snapshot_lookups_by_namespace_and_name() -> None:
    dep = DeploymentObs(replicas=1)
    pod = PodObs("p", "Running")
    s = Snapshot(policies={("ns", "gold"): {"spec": {}}},
                 deployments={("ns", "chat"): dep},
                 pods={("ns", "chat"): [pod]},
                 variant_deployments={("ns", "chat"): {"h100": dep}})
    assert s.policy("ns", "gold") == {"spec": {}}
    assert s.policy("gold", "ns") is None
    assert s.deployment("ns", "chat") is dep
    assert s.pods_of("ns", "chat") == [pod]
    assert s.variants("ns", "chat") == {"h100": dep}
    assert s.variants("other", "chat") == {}


# ---------------------------------------------------------------- values and errors


def test_api_rejection_keeps_the_servers_message(golden: Any) -> None:
    err = ApiRejected("Deployment", "chat", 422, "spec.replicas: must be >= 0")
    assert (err.kind, err.name, err.status, err.message) == (
        "Deployment", "chat", 422, "spec.replicas: must be >= 0")
    golden.check("api", "cluster.api-rejected", str(err))


@pytest.mark.parametrize("value", [
    pytest.param(NodeInfo("n", {}), id="node"),
    pytest.param(DeploymentObs(), id="deployment"),
    pytest.param(PodObs("p", "Running"), id="pod"),
    pytest.param(Snapshot(), id="snapshot"),
])
def test_observed_objects_are_immutable(value: object) -> None:
    with pytest.raises(FrozenInstanceError):
        value.name = "other"  # type: ignore[attr-defined]
