"""The development commands: reachable as ``slo-devtools`` and, through the entry points of
this distribution, as ``slo-operator demo`` / ``slo-operator bench``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slo_devtools.commands import main as devtools_main
from slo_operator.cli import main as operator_main


@pytest.mark.parametrize("cmd", ["replica", "demo", "bench"])
def test_every_devtools_command_has_help(cmd: str) -> None:
    r = CliRunner().invoke(devtools_main, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    assert "Usage:" in r.output


@pytest.mark.parametrize("cmd", ["demo", "bench"])
def test_operator_cli_offers_the_installed_devtools_commands(cmd: str) -> None:
    r = CliRunner().invoke(operator_main, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    assert "needs slo-devtools" not in r.output
    assert "--out" in r.output


def test_bench_rejects_an_unknown_trace_with_exit_status_2() -> None:
    r = CliRunner().invoke(operator_main, ["bench", "--trace", "no-such-trace", "--out", "x"])
    assert r.exit_code == 2
    assert "no-such-trace" in r.output
