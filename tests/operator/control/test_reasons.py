"""Each reason constant is the value docs/slo-loop.md ("Reasons") lists, in the table that
says what it means: decision reasons, no-valid-decision reasons, ScalingLimited reasons.

The reasons are public (status, conditions, Events): a constant renamed, emptied or moved
to the wrong group fails here.
"""

from __future__ import annotations

import re

from slo_operator.api import conditions
from slo_operator.control import reasons as R
from tests.support.paths import REPO

DOC = (REPO / "docs" / "slo-loop.md").read_text()


def documented_tables() -> list[list[str]]:
    """The first column of each table under "## Reasons", in order."""
    section = DOC.split("\n## Reasons\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[str]] = []
    rows: list[str] = []
    for line in section.splitlines():
        m = re.match(r"\| `([A-Za-z]+)` \|", line)
        if m:
            rows.append(m.group(1))
        elif rows:
            tables.append(rows)
            rows = []
    if rows:
        tables.append(rows)
    return tables


DECISION = [R.LOAD_INCREASED, R.SLO_VIOLATED, R.LOAD_DECREASED, R.WITHIN_TOLERANCE, R.STEADY,
            R.STABILIZING, R.REVERSAL_BLOCKED, R.WAITING_FOR_REPLICAS, R.PODS_UNREPORTED,
            R.LOAD_RISING, R.LATENCY_HEADROOM, R.LIMIT_LOWERED,
            R.LIMIT_RAISED, R.LIMIT_RESTORED, R.LIMIT_RESIZED, R.NO_TRAFFIC,
            R.SCALED_TO_ZERO_REASON, R.WOKEN]
INVALID = [R.METRICS_UNAVAILABLE, R.METRICS_STALE, R.METRICS_EMPTY, R.METRICS_PARTIAL]
LIMITED = [R.TOO_FEW_REPLICAS, R.TOO_MANY_REPLICAS, R.SCALE_UP_LIMIT, R.SCALE_DOWN_LIMIT,
           R.GPU_BUDGET, R.PENDING, R.NO_GPUS, R.GPUS_RECLAIMED, R.TARGET_INFEASIBLE]


def test_the_doc_has_three_tables_of_reasons() -> None:
    assert len(documented_tables()) == 3


def test_decision_reasons_are_the_documented_ones() -> None:
    assert documented_tables()[0] == DECISION


def test_invalid_reasons_are_the_documented_ones() -> None:
    assert documented_tables()[1] == INVALID
    assert set(documented_tables()[1]) == R.INVALID_REASONS


def test_scaling_limited_reasons_are_the_documented_ones() -> None:
    assert documented_tables()[2] == LIMITED


def test_reasons_shared_with_conditions_are_the_same_strings() -> None:
    assert R.SCALED_TO_ZERO_REASON == conditions.SCALED_TO_ZERO == "ScaledToZero"
    assert R.PENDING == conditions.PODS_PENDING == "PodsPending"
    assert R.NO_GPUS == conditions.INSUFFICIENT_GPUS == "InsufficientGPUs"


def test_every_reason_constant_is_in_one_table() -> None:
    constants = {k: v for k, v in vars(R).items() if k.isupper() and k != "INVALID_REASONS"}
    assert all(isinstance(v, str) and v for v in constants.values()), constants
    documented = DECISION + INVALID + LIMITED
    assert set(constants.values()) == set(documented)
    assert len(set(documented)) == len(documented)
