"""`slo-operator demo`, end to end: a short, fast replay on the real local stack.

One demo run (a slice of each tenant's trace at high speed) is shared by the checks on its
summary; a second run is interrupted with SIGINT (Ctrl-C) right after startup and must stop
everything it started. Both run the real CLI as a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slo_devtools.demo.entry import INTERRUPTED_EXIT
from slo_devtools.demo.scenario import ROOT, TENANTS
from slo_devtools.devenv.control_plane import Binaries, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# A minute at the default x20 replays the first 20 minutes of each trace (then 45 s of
# cool-down without load).
DURATION_S = 60
SPEED = 20


def _require_binaries() -> None:
    b = Binaries.discover()
    missing = b.missing() + [n for n in ("helm", "prometheus", "kubectl")
                             if getattr(b, n) is None]
    if not missing:
        return
    msg = f"binaries not built ({', '.join(missing)}); run `bash hack/build-binaries.sh`"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(msg, pytrace=False)
    # The demo would build them itself, which takes about 15 minutes on 2 cores.
    pytest.skip(msg)


def _demo_cmd(out: Path, duration: float) -> list[str]:
    return [sys.executable, "-m", "slo_operator.cli", "demo", "--duration", f"{duration:g}",
            "--speed", f"{SPEED:g}", "--out", str(out)]


def _leftovers(workdir: str) -> list[str]:
    """Command lines of live processes that mention the run's work directory."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if workdir in cmdline:
            found.append(cmdline)
    return found


@dataclass(frozen=True)
class DemoRun:
    rc: int
    output: str
    out: Path
    summary: dict[str, Any]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    _require_binaries()
    out = tmp_path_factory.mktemp("demo") / "results"
    proc = subprocess.run(_demo_cmd(out, DURATION_S), cwd=ROOT, capture_output=True, text=True,
                          timeout=540, env={**os.environ, "COLUMNS": "200"})
    output = proc.stdout + proc.stderr
    summary_file = out / "summary.json"
    assert proc.returncode == 0, output
    assert summary_file.is_file(), output
    return DemoRun(proc.returncode, output, out, json.loads(summary_file.read_text()))


def test_demo_reports_both_tenants_with_replicas_and_live_limit(demo_run: DemoRun) -> None:
    s = demo_run.summary
    assert s["interrupted"] is False
    assert s["speed"] == SPEED and s["duration_s"] == DURATION_S
    assert f"time compressed x{SPEED}" in demo_run.output
    services = {svc["service"]: svc for svc in s["services"]}
    assert set(services) == {t.service for t in TENANTS}
    chat, code = services["tenant-chat/chat"], services["tenant-code/code"]
    # Different GPUs, as the tenants' manifests ask (node labels resolved by the operator).
    assert chat["gpu"] and "H100" in chat["gpu"]
    assert code["gpu"] and "A100" in code["gpu"]
    for svc in (chat, code):
        assert svc["samples"] >= DURATION_S // 2
        # The operator created the Deployment and its pods became Ready on the fake nodes.
        assert svc["replicas_max"] is not None and svc["replicas_max"] >= 1
        # The live limit is set on the running pods and reported in status.
        assert svc["batch_limit_max"] is not None
        assert svc["offered_requests"] > 0
    for name in ("tenant-chat_chat.png", "tenant-code_code.png"):
        assert (demo_run.out / name).read_bytes()[:4] == b"\x89PNG"
    assert (demo_run.out / "logs" / "slo-operator.log").is_file()
    assert (demo_run.out / "samples.jsonl").stat().st_size > 0


def test_demo_judges_windows_from_the_clients_streamed_latencies(demo_run: DemoRun) -> None:
    for svc, c in demo_run.summary["client"].items():
        w = c["windows"]
        # Streamed: the client saw first tokens; a 60 s replay at 10 s windows judges
        # several of them, each good or listed with the objectives it missed.
        assert c["ttft_p95_s"] is not None, svc
        assert w["window_s"] == 10 and w["windows"] >= 3, (svc, w)
        assert w["good"] + len(w["missed"]) == w["windows"], (svc, w)
        assert all(m["missed"] for m in w["missed"]), (svc, w)


def test_demo_leaves_nothing_behind(demo_run: DemoRun) -> None:
    workdir = demo_run.summary["workdir"]
    assert workdir and not Path(workdir).exists()
    assert _leftovers(workdir) == []


def test_demo_shows_slo_driven_scale_out_and_scale_in(demo_run: DemoRun) -> None:
    services = demo_run.summary["services"]
    assert sum(svc["scale_outs"] for svc in services) >= 1
    assert sum(svc["scale_ins"] for svc in services) >= 1
    # Every service was judged against its objectives from Prometheus' signals.
    assert all(svc["compliant_fraction"] is not None for svc in services)
    reasons = {d["reason"] for svc in services for d in svc["decisions"]}
    assert reasons & {"LoadIncreased", "SLOViolated"}
    assert reasons & {"LoadDecreased", "NoTraffic"}


def test_demo_shows_a_live_limit_change(demo_run: DemoRun) -> None:
    chat = next(s for s in demo_run.summary["services"] if s["service"] == "tenant-chat/chat")
    assert chat["limit_changes"] >= 1, [d["reason"] for d in chat["decisions"]]
    assert chat["batch_limit_min"] < chat["batch_limit_max"]


@pytest.fixture
def interrupted_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    _require_binaries()
    out = tmp_path / "results"
    proc = subprocess.Popen(_demo_cmd(out, 300), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_stops_every_process_and_still_writes_the_summary(
        interrupted_run: tuple[subprocess.Popen[str], Path]) -> None:
    proc, out = interrupted_run
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    wait_for(lambda: proc.poll() is not None or any("Ready to replay" in x for x in lines),
             timeout=240, desc="the demo to start replaying")
    assert proc.poll() is None, "".join(lines)
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    reader.join(timeout=10)
    output = "".join(lines)
    assert rc == INTERRUPTED_EXIT, output
    assert "Interrupted" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["workdir"] and not Path(summary["workdir"]).exists()
    assert _leftovers(summary["workdir"]) == []
