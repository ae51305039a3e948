"""SLO history values are immutable: a stored history never changes under its holder."""

from __future__ import annotations

import dataclasses

import pytest

from slo_operator.slo.evaluate import Outcome, SLOHistory, Verdict


def test_history_and_verdict_are_immutable() -> None:
    history = SLOHistory(60, 10, "gb")
    with pytest.raises(dataclasses.FrozenInstanceError):
        history.outcomes = "g"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Verdict(Outcome.GOOD).message = "x"  # type: ignore[misc]
