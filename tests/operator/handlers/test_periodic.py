"""How the periodic pass labels an applied decision for the operator's metrics (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from slo_operator.handlers.periodic import decision_direction


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param({"desiredReplicas": 2}, {"desiredReplicas": 3}, "scale_up", id="up"),
        pytest.param({"desiredReplicas": 3}, {"desiredReplicas": 1}, "scale_down", id="down"),
        pytest.param({"desiredReplicas": 2, "batchLimit": 64},
                     {"desiredReplicas": 2, "batchLimit": 32}, "batch_down", id="limit-down"),
        pytest.param({"batchLimit": 32}, {"batchLimit": 48}, "batch_up", id="limit-up"),
        pytest.param({"desiredReplicas": 2, "batchLimit": 64},
                     {"desiredReplicas": 2, "batchLimit": 64}, "hold", id="hold"),
        pytest.param({}, {"desiredReplicas": 2}, "hold", id="first-decision"),
    ],
)
def test_decision_direction(old: dict[str, Any], new: dict[str, Any], want: str) -> None:
    assert decision_direction(old, new) == want
