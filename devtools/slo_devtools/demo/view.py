"""The demo's terminal view: one row per service, built from samples (no I/O here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from slo_devtools.demo.build import format_duration
from slo_devtools.demo.timeline import Sample, ServiceSummary
from slo_operator.api import conditions as C

# The decision message is long (the whole capacity computation); the row shows its start.
DECISION_CHARS = 90
_SLO_STYLE = {C.SLO_MET: "green", C.SLO_MISSED: "bold red", C.AWAITING_METRICS: "yellow"}


@dataclass(frozen=True)
class Header:
    elapsed: float  # wall seconds since the replay started
    replay: float  # wall seconds the replay lasts
    total: float  # wall seconds the demo watches (the replay, then a cool-down without load)
    speed: float  # trace seconds per wall second
    traces: str  # e.g. "tenant-chat/chat <- azure-conv, tenant-code/code <- azure-code"


def _num(v: float | int | None, fmt: str = "{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def versus(value: float | None, target: float | None, fmt: str = "{:.0f}") -> Text:
    """``value / target``, red when above the target, green when within it."""
    if value is None:
        return Text("- / " + _num(target, fmt), style="dim")
    style = "" if target is None else ("bold red" if value > target else "green")
    return Text(f"{fmt.format(value)} / {_num(target, fmt)}", style=style)


def service_row(s: Sample) -> list[RenderableType]:
    """The cells of one service's row."""
    t = s.targets
    d = s.last_decision
    decision = Text("-", style="dim") if d is None else Text.assemble(
        (d.reason, "bold"), f": {d.message}" if d.message else "")
    decision.truncate(DECISION_CHARS, overflow="ellipsis")
    replicas = f"{_num(s.ready)}/{_num(s.desired if s.desired is not None else s.replicas)}"
    return [
        Text(s.service, style="bold"),
        s.gpu or "-",
        f"{_num(s.offered_rps, '{:.1f}')} ({_num(s.request_rate, '{:.1f}')})",
        replicas,
        _num(s.batch_limit),
        versus(s.e2e_ms, t.e2e_ms if t else None),
        versus(s.ttft_ms, t.ttft_ms if t else None),
        versus(s.jitter, t.jitter if t else None, "{:.2f}"),
        Text(s.slo_state, style=_SLO_STYLE.get(s.slo_state, "dim")),
        decision,
    ]


def services_table(latest: Sequence[Sample]) -> Table:
    """The live table: the newest sample of each service."""
    table = Table(expand=True, header_style="bold cyan")
    right: dict[str, Any] = {"justify": "right", "no_wrap": True}
    for col, kw in (
        ("service", {"no_wrap": True}), ("GPU", {"no_wrap": True}),
        ("load req/s (seen)", right), ("replicas ready/desired", right), ("live limit", right),
        ("P99 ms / target", right), ("TTFT ms / target", right), ("jitter / max", right),
        ("SLO", {"no_wrap": True}), ("last decision", {"ratio": 1, "overflow": "fold"}),
    ):
        table.add_column(col, **kw)
    for s in sorted(latest, key=lambda s: s.service):
        table.add_row(*service_row(s))
    return table


def render(latest: Sequence[Sample], header: Header) -> RenderableType:
    """Header, progress through the replay and the services table."""
    done = min(1.0, header.elapsed / header.total) if header.total > 0 else 1.0
    bar_width = 30
    filled = round(done * bar_width)
    phase = ("replaying" if header.elapsed < header.replay
             else "cool-down: no load, watch the scale-in")
    title = Text.assemble(
        ("slo-operator demo", "bold"),
        f"  {format_duration(header.elapsed)} / {format_duration(header.total)}  ",
        ("█" * filled + "░" * (bar_width - filled), "cyan"),
        f"  {phase}; trace time x{header.speed:g} (1 s here = {header.speed:g} s of trace)",
    )
    lines: list[RenderableType] = [Text(header.traces, style="dim"), services_table(latest)]
    return Panel(Group(*lines), title=title, title_align="left")


def summary_table(summaries: Sequence[ServiceSummary],
                  client: Mapping[str, Mapping[str, Any]] | None = None) -> Table:
    """The end-of-run table; ``client`` adds what the load generator saw per service."""
    client = client or {}
    table = Table(title="Summary", header_style="bold cyan")
    for col in ("service", "GPU", "scale\nouts", "scale\nins", "limit\nchanges", "replicas",
                "replica\nseconds", "live\nlimit", "max P99\nms", "max TTFT\nms", "SLO\nmet",
                "windows\ngood", "requests\nok/sent"):
        name = col in ("service", "GPU")
        table.add_column(col, justify="left" if name else "right", no_wrap=True)
    for s in summaries:
        table.add_row(
            s.service,
            s.gpu or "-",
            str(s.scale_outs),
            str(s.scale_ins),
            str(s.limit_changes),
            f"{_num(s.replicas_min)}..{_num(s.replicas_max)}",
            f"{s.replica_seconds:.0f}",
            f"{_num(s.batch_limit_min)}..{_num(s.batch_limit_max)}",
            _num(s.e2e_max_ms),
            _num(s.ttft_max_ms),
            "-" if s.compliant_fraction is None else f"{100 * s.compliant_fraction:.0f}%",
            _windows(client.get(s.service)),
            _requests(client.get(s.service)),
        )
    return table


def _windows(c: Mapping[str, Any] | None) -> str:
    w = (c or {}).get("windows") or {}
    return "-" if not w.get("windows") else f"{w.get('good', 0)}/{w['windows']}"


def _requests(c: Mapping[str, Any] | None) -> str:
    return "-" if not c else f"{c.get('ok', 0)}/{c.get('requests', 0)}"
