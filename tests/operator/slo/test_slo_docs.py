"""docs/slo-loop.md says what the code does: every reason, state and query is there."""

from __future__ import annotations

import pytest

from slo_operator.api.observe import MetricsState
from slo_operator.control import reasons
from slo_operator.slo.promql import Query, build_queries
from tests.support.paths import REPO

DOC = (REPO / "docs" / "slo-loop.md").read_text()
REASONS = sorted({v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)})


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_is_documented(reason: str) -> None:
    assert f"`{reason}`" in DOC


@pytest.mark.parametrize("state", [s.value for s in MetricsState])
def test_every_metrics_state_is_documented(state: str) -> None:
    assert f"`{state}`" in DOC


@pytest.mark.parametrize("query", build_queries([60]).queries, ids=lambda q: q.name)
def test_documented_queries_are_the_built_ones(query: Query) -> None:
    assert f"```promql\n{query.expr}\n```" in DOC
