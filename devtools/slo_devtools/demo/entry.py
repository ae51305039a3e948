"""The ``slo-operator demo`` command's body: options in, errors out as messages."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from slo_devtools.demo.build import BuildError
from slo_devtools.demo.scenario import DEFAULT_SPEED, ScenarioError
from slo_devtools.demo.session import Options, run_demo
from slo_devtools.demo.stack import DemoError
from slo_devtools.devenv.control_plane import ClusterError

INTERRUPTED_EXIT = 130


def main(*, duration: float | None, trace: str | None, speed: float | None, out: Path | None,
         keep: bool) -> None:
    """Run the demo; user and environment errors become one-line messages, not tracebacks."""
    console = Console()
    opts = Options(duration=duration, trace=trace, speed=speed or DEFAULT_SPEED, out=out,
                   keep=keep)
    try:
        result = run_demo(opts, console)
    except ScenarioError as e:
        raise click.UsageError(str(e)) from e
    except (BuildError, ClusterError, DemoError, TimeoutError) as e:
        raise click.ClickException(str(e)) from e
    if result.interrupted:
        # The shell's convention for a command ended by Ctrl-C.
        raise SystemExit(INTERRUPTED_EXIT)
