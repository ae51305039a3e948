"""Reading hack/build-binaries.sh output into build steps."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from slo_devtools.demo.build import (
    COLD_BUILD_SECONDS,
    BuildError,
    BuildProblem,
    StepsFinished,
    StepStarted,
    StepSummary,
    ensure_binaries,
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
        pytest.param("prometheus               3.16.0           3s  fetched",
                     StepSummary("prometheus", "3.16.0", 3.0, True), id="summary-fetched"),
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

    from slo_devtools.demo.scenario import ROOT

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


def _fake_root(tmp_path: Path, body: str) -> Path:
    (tmp_path / "hack").mkdir(parents=True)
    (tmp_path / "hack" / "build-binaries.sh").write_text(body)
    return tmp_path


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_ensure_binaries_shows_each_build_step_and_returns_what_was_published(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
             "kubectl", "helm", "prometheus")
    env = {f"SLO_{n.upper().replace('-', '_')}": _executable(cache / n) for n in names}
    (cache / "stages").mkdir()
    env_lines = "\n".join(f"{k}={v}" for k, v in env.items()) + f"\nSLO_KWOK_STAGES={cache}/stages"
    root = _fake_root(tmp_path / "repo", f"""
echo ">> building etcd v3.6.16 (log: /l/etcd.log)"
echo "go: downloading something"
echo ">> building prometheus and promtool 3.16.0 (log: /l/p.log)"
echo "== build summary (total 2s)"
echo "etcd                     v3.6.16          1s  built"
echo "prometheus               3.16.0           1s  built"
echo "helm                     v4.3.2           0s  cached"
cat > {cache}/slo-bin.env <<'ENV'
{env_lines}
ENV
""")
    for key in list(os.environ):
        if key.startswith("SLO_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SLO_BIN_CACHE", str(cache))
    console = Console(record=True, width=200, color_system=None)
    binaries = ensure_binaries(root, console)
    out = console.export_text()
    assert "Building etcd v3.6.16 from source (one time only, about 1m20s" in out
    assert "Building Prometheus and promtool 3.16.0" in out
    assert "built etcd, prometheus" in out
    assert binaries.etcd == env["SLO_ETCD"] and binaries.prometheus == env["SLO_PROMETHEUS"]


def test_a_failed_build_names_the_failure(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, """
echo ">> building helm v4.3.2 (log: /l/h.log)"
echo "!! helm failed; last lines of /l/h.log:" >&2
echo "compile error" >&2
exit 1
""")
    with pytest.raises(BuildError, match=r"(?s)failed \(1\): helm failed.*compile error"):
        ensure_binaries(root, Console(file=io.StringIO()))
