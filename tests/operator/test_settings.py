"""The operator's configuration: one settings object from flags and environment variables,
and one version, read from the installed distribution's metadata."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import fields
from typing import Any

import kopf
import pytest
import yaml
from click.testing import CliRunner

from slo_operator.adapters.prometheus import redact_url
from slo_operator.cli import main
from slo_operator.settings import OPTIONS, OperatorSettings, default_runtime_image, operator_version
from tests.support.paths import REPO


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``slo-operator run`` hands to kopf, without running kopf."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(kopf, "run", lambda **kw: seen.update(kw))
    return seen


def test_every_setting_has_a_flag_and_an_environment_variable() -> None:
    assert {o.field for o in OPTIONS} == {f.name for f in fields(OperatorSettings)}
    help_text = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    for opt in OPTIONS:
        assert opt.flag in help_text
        assert opt.env.startswith("SLO_")
    assert len({o.env for o in OPTIONS}) == len(OPTIONS)


@pytest.mark.parametrize(("args", "env", "want"), [
    pytest.param([], {}, OperatorSettings(), id="defaults-without-flags-or-env"),
    pytest.param(["--interval", "3", "--prometheus-url", "http://p:9090"], {},
                 OperatorSettings(interval=3.0, prometheus_url="http://p:9090"),
                 id="flags"),
    pytest.param([], {"SLO_RECONCILE_INTERVAL": "4", "SLO_WORKERS": "2",
                      "SLO_NAMESPACES": "team-a team-b"},
                 OperatorSettings(interval=4.0, workers=2, namespaces=("team-a", "team-b")),
                 id="environment"),
    pytest.param(["--interval", "5"], {"SLO_RECONCILE_INTERVAL": "4"},
                 OperatorSettings(interval=5.0), id="flag-wins-over-environment"),
    pytest.param(["--manage-alert-rules", "--alert-rule-label", "release=kps"], {},
                 OperatorSettings(manage_alert_rules=True, alert_rule_labels=("release=kps",)),
                 id="managed-alert-rules"),
])
def test_run_builds_one_settings_object_from_flags_and_environment(
        started: dict[str, Any], args: list[str], env: dict[str, str],
        want: OperatorSettings) -> None:
    before = dict(os.environ)
    r = CliRunner().invoke(main, ["run", *args], env=env)
    assert r.exit_code == 0, r.output
    assert started["memo"].config == want
    assert started["clusterwide"] is (not want.namespaces)
    assert dict(os.environ) == before, "configuration is passed on, not written to os.environ"


@pytest.mark.parametrize(("args", "want_flag"), [
    pytest.param(["--interval", "0"], "--interval", id="zero-interval"),
    pytest.param(["--workers", "0"], "--workers", id="no-workers"),
    pytest.param(["--metrics-port", "70000"], "--metrics-port", id="port-out-of-range"),
    pytest.param(["--alert-rule-label", "release"], "--alert-rule-label", id="label-no-value"),
    pytest.param(["--alert-rule-label", "team=a b"], "--alert-rule-label",
                 id="label-value-with-space"),
    pytest.param(["--alert-rule-label", "-bad/key=x"], "--alert-rule-label",
                 id="label-key-bad-prefix"),
])
def test_run_refuses_a_bad_setting_naming_its_flag(
        started: dict[str, Any], args: list[str], want_flag: str) -> None:
    r = CliRunner().invoke(main, ["run", *args])
    assert r.exit_code == 2
    assert want_flag in r.output
    assert not started


def test_runtime_image_defaults_to_this_release() -> None:
    assert OperatorSettings().image == default_runtime_image() == \
        f"ghcr.io/slo-operator/slo-operator:{operator_version()}"
    assert OperatorSettings(runtime_image="registry.local/slo:9").image == "registry.local/slo:9"


def test_version_comes_from_the_installed_distribution() -> None:
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0
    assert operator_version() in r.output


def test_distributions_and_chart_carry_the_same_version() -> None:
    version = operator_version()
    for dist in ("operator", "runtime", "devtools"):
        project = tomllib.loads((REPO / dist / "pyproject.toml").read_text())["project"]
        assert project["version"] == version, dist
        for dep in project.get("dependencies", []):
            if dep.startswith("slo-"):
                assert re.fullmatch(r"slo-[a-z]+==" + re.escape(version), dep), dep
    chart = yaml.safe_load((REPO / "charts" / "slo-operator" / "Chart.yaml").read_text())
    assert chart["appVersion"] == version


@pytest.mark.parametrize(("url", "want"), [
    pytest.param("http://prometheus:9090", "http://prometheus:9090", id="no-credentials"),
    pytest.param("https://alice:s3cret@prom.example:9443/api",
                 "https://alice:***@prom.example:9443/api", id="password-hidden"),
    pytest.param(None, None, id="unset"),
])
def test_logged_prometheus_url_hides_its_password(url: str | None, want: str | None) -> None:
    assert redact_url(url) == want
