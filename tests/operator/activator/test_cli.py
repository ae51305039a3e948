"""`slo-operator activator`: its options, their environment variables, bad input."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slo_operator.api.activation import (
    ACTIVATOR_PORT,
    DEFAULT_QUEUE_PER_SERVICE,
    DEFAULT_WAKE_TIMEOUT_S,
)
from slo_operator.cli import main


def test_help_names_every_option_its_variable_and_default() -> None:
    out = CliRunner().invoke(main, ["activator", "--help"], terminal_width=200).output
    for flag, env in [("--port", "SLO_ACTIVATOR_PORT"), ("--host", "SLO_ACTIVATOR_HOST"),
                      ("--queue-per-service", "SLO_ACTIVATOR_QUEUE_PER_SERVICE"),
                      ("--timeout", "SLO_ACTIVATOR_TIMEOUT"), ("--kubeconfig", "SLO_KUBECONFIG"),
                      ("--pod-name", "POD_NAME")]:
        assert flag in out and env in out
    for default in (ACTIVATOR_PORT, DEFAULT_QUEUE_PER_SERVICE, DEFAULT_WAKE_TIMEOUT_S):
        assert f"default: {default}" in out


@pytest.mark.parametrize(("args", "env", "names"), [
    (["--timeout", "0"], {}, "--timeout"),
    ([], {"SLO_ACTIVATOR_TIMEOUT": "-3"}, "--timeout"),
    ([], {"SLO_ACTIVATOR_QUEUE_PER_SERVICE": "0"}, "--queue-per-service"),
    (["--port", "70000"], {}, "--port"),
])
def test_bad_values_exit_2_naming_the_option(args: list[str], env: dict[str, str],
                                             names: str) -> None:
    result = CliRunner().invoke(main, ["activator", *args], env=env)
    assert result.exit_code == 2
    assert names in result.output


def test_unreadable_kubeconfig_is_one_line_not_a_traceback() -> None:
    result = CliRunner().invoke(main, ["activator", "--kubeconfig", "/nonexistent/config"])
    assert result.exit_code == 2
    assert "cannot load the Kubernetes configuration" in result.output
    assert "Traceback" not in result.output
