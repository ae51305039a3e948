"""Reading hack/build-binaries.sh output into build steps."""

from __future__ import annotations

import pytest

from slo_operator.demo.build import (
    COLD_BUILD_SECONDS,
    BuildProblem,
    StepsFinished,
    StepStarted,
    StepSummary,
    format_duration,
    parse_line,
)


@pytest.mark.parametrize(
    ("line", "want"),
    [
        pytest.param(">> building etcd v3.6.16 (log: /c/logs/etcd-v3.6.16.log)\n",
                     StepStarted("etcd", "v3.6.16", "/c/logs/etcd-v3.6.16.log"), id="etcd"),
        pytest.param(">> building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl "
                     "v1.37.2 (log: /c/k.log)",
                     StepStarted("kubernetes", "v1.37.2", "/c/k.log"), id="four-kube-binaries"),
        pytest.param(">> building prometheus and promtool 3.16.0 (log: /c/p.log)",
                     StepStarted("prometheus", "3.16.0", "/c/p.log"), id="prometheus-release"),
        pytest.param(">> building helm v4.3.2 (log: /c/h.log)",
                     StepStarted("helm", "v4.3.2", "/c/h.log"), id="helm"),
        pytest.param("== build summary (total 912s)", StepsFinished(), id="summary-header"),
        pytest.param("kubernetes               v1.37.2       590s  built",
                     StepSummary("kubernetes", "v1.37.2", 590.0, True), id="summary-built"),
        pytest.param("etcd                     v3.6.16          0s  cached",
                     StepSummary("etcd", "v3.6.16", 0.0, False), id="summary-cached"),
        pytest.param("!! helm failed; last lines of /c/h.log:",
                     BuildProblem("helm failed; last lines of /c/h.log:"), id="failure"),
        pytest.param("go: downloading k8s.io/api v0.37.2", None, id="go-noise"),
        pytest.param("SLO_ETCD=/c/etcd-v3.6.16/etcd", None, id="env-file-echo"),
    ],
)
def test_parse_line(line: str, want: object) -> None:
    assert parse_line(line) == want


def test_every_step_the_script_builds_has_an_estimate() -> None:
    assert set(COLD_BUILD_SECONDS) == {"etcd", "kubernetes", "kwok", "helm", "prometheus"}
    assert all(v > 0 for v in COLD_BUILD_SECONDS.values())


@pytest.mark.parametrize(("secs", "want"), [(0, "0s"), (12.4, "12s"), (60, "1m00s"),
                                            (725, "12m05s"), (-3, "0s")])
def test_format_duration(secs: float, want: str) -> None:
    assert format_duration(secs) == want


def test_parser_reads_every_build_line_the_script_prints() -> None:
    """The script's own ``>> building`` echo lines, with versions filled in, parse to the step
    the estimates know (so a reworded script line fails here, not silently in the demo)."""
    import re

    from slo_operator.demo.scenario import ROOT

    script = (ROOT / "hack" / "build-binaries.sh").read_text()
    echoes = re.findall(r'echo "(>> building [^"]+)"', script)
    assert len(echoes) == 5
    steps = set()
    for echo in echoes:
        line = re.sub(r"\$\{?(\w+)\}?", lambda m: "/l.log" if m[1] == "log" else "v1.2.3", echo)
        event = parse_line(line)
        assert isinstance(event, StepStarted), line
        steps.add(event.step)
    assert steps == set(COLD_BUILD_SECONDS)
