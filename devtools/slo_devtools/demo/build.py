"""Build or reuse the local binaries through ``hack/build-binaries.sh``, with a progress bar
and a time estimate for each one-time build step.

The script is the one home of versions and build recipes; this module only runs it and reads
its ``>> building ...`` and build-summary lines. A warm cache makes the script a few seconds of
version checks.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
)
from rich.text import Text

from slo_devtools.devenv.control_plane import Binaries

# Cold build time of each step (empty Go caches), in seconds, measured with
# hack/build-binaries.sh on the reference machine (2 cores shared with other work; Prometheus
# takes about 5 minutes on 2 idle cores and over 20 under load). Only used to draw the
# progress bar and the time estimate.
COLD_BUILD_SECONDS: dict[str, float] = {
    "etcd": 80.0,
    "kubernetes": 590.0,
    "kwok": 180.0,
    "helm": 270.0,
    "prometheus": 600.0,
}
STEP_LABELS: dict[str, str] = {
    "etcd": "etcd",
    "kubernetes": "kube-apiserver, controller-manager, scheduler, kubectl",
    "kwok": "kwok (fake GPU nodes)",
    "helm": "helm",
    "prometheus": "Prometheus and promtool",
}

_STARTED = re.compile(r"^>> building (?P<what>.+) (?P<version>v?\d[\w.+-]*) \(log: (?P<log>.+)\)$")
_SUMMARY_HEADER = re.compile(r"^== build summary")
_SUMMARY_ROW = re.compile(
    r"^(?P<step>\S+)\s+(?P<version>\S+)\s+(?P<secs>\d+)s\s+(?P<how>cached|built|fetched)\s*$"
)
_FAILED = re.compile(r"^!! (?P<message>.+)$")


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class StepStarted:
    step: str
    version: str
    log: str


@dataclass(frozen=True)
class StepsFinished:
    """The summary header: every step that was going to build has finished."""


@dataclass(frozen=True)
class StepSummary:
    step: str
    version: str
    seconds: float
    built: bool


@dataclass(frozen=True)
class BuildProblem:
    message: str


BuildEvent = StepStarted | StepsFinished | StepSummary | BuildProblem


def step_of(what: str) -> str:
    """The step key for the subject of a ``>> building`` line (its first binary)."""
    first = what.split(",")[0].split()[0]
    return "kubernetes" if first.startswith("kube") else first


def parse_line(line: str) -> BuildEvent | None:
    """One line of build-binaries.sh output as an event, or None for other lines."""
    line = line.rstrip()
    if m := _STARTED.match(line):
        return StepStarted(step_of(m["what"]), m["version"], m["log"])
    if _SUMMARY_HEADER.match(line):
        return StepsFinished()
    if (m := _SUMMARY_ROW.match(line)) and m["step"] in COLD_BUILD_SECONDS:
        return StepSummary(m["step"], m["version"], float(m["secs"]), m["how"] != "cached")
    if m := _FAILED.match(line):
        return BuildProblem(m["message"])
    return None


def format_duration(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``12`` -> ``12s``."""
    s = max(0, round(seconds))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class _Estimate(ProgressColumn):
    """Time left against the step's cold-build estimate (never a negative number)."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text(f"done in {format_duration(task.elapsed or 0.0)}", style="green")
        total = task.total or 0.0
        left = total - (task.elapsed or 0.0)
        if left <= 0:
            return Text("longer than estimated", style="yellow")
        return Text(f"about {format_duration(left)} left", style="cyan")


def build_script(root: Path) -> Path:
    script = root / "hack" / "build-binaries.sh"
    if not script.is_file():
        raise BuildError(f"{script} not found: run the demo from a clone of the repository")
    return script


def ensure_binaries(root: Path, console: Console) -> Binaries:
    """Run the build script (building what is missing, reusing the cache) and return the
    binaries it published; raise :class:`BuildError` naming what failed."""
    script = build_script(root)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        cwd=root,
    )
    assert proc.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="build-output", daemon=True).start()
    tail: deque[str] = deque(maxlen=40)
    summaries: list[StepSummary] = []
    problems: list[str] = []
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        _Estimate(),
        console=console,
        transient=False,
    )
    current: TaskID | None = None

    def task(tid: TaskID) -> Task:
        return next(t for t in progress.tasks if t.id == tid)

    try:
        with progress:
            while True:
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    line = ""
                if line is None:
                    break
                if current is not None:
                    t = task(current)
                    # The bar follows the clock against the estimate; it stops short of full
                    # until the script says the step is done.
                    progress.update(current, completed=min(t.elapsed or 0.0,
                                                           0.99 * (t.total or 1.0)))
                if not line:
                    continue
                tail.append(line.rstrip())
                event = parse_line(line)
                if isinstance(event, StepStarted | StepsFinished) and current is not None:
                    progress.update(current, completed=task(current).total)
                    current = None
                if isinstance(event, StepStarted):
                    est = COLD_BUILD_SECONDS.get(event.step, 300.0)
                    label = STEP_LABELS.get(event.step, event.step)
                    console.print(
                        f"Building {label} {event.version} from source (one time only, "
                        f"about {format_duration(est)} on 2 cores; log: {event.log})"
                    )
                    current = progress.add_task(f"{label} {event.version}", total=est)
                elif isinstance(event, StepSummary):
                    summaries.append(event)
                elif isinstance(event, BuildProblem):
                    problems.append(event.message)
    except BaseException:
        proc.terminate()
        proc.wait()
        raise
    rc = proc.wait()
    if rc != 0:
        detail = "\n".join(tail)
        raise BuildError(f"hack/build-binaries.sh failed ({rc}): {'; '.join(problems)}\n{detail}")
    built = [s for s in summaries if s.built]
    how = (f"built {', '.join(s.step for s in built)}" if built else "all cached")
    console.print(f"Binaries ready in {format_duration(time.monotonic() - t0)} ({how}).")
    binaries = Binaries.discover()
    missing = binaries.missing()
    for name in ("helm", "prometheus", "kubectl"):
        if getattr(binaries, name) is None:
            missing.append(name)
    if missing:
        raise BuildError(f"binaries still missing after the build: {', '.join(missing)}")
    return binaries
