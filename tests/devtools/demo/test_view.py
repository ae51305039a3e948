"""The live view and the summary table show the numbers of the samples."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from slo_devtools.demo.timeline import Decision, Sample, Targets, summarize
from slo_devtools.demo.view import Header, render, summary_table, versus
from slo_operator.api import conditions as C

TARGETS = Targets(6000.0, 0.99, 500.0, 0.95, 0.2)


def text_of(renderable: object) -> str:
    console = Console(width=220, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def make(**kw: object) -> Sample:
    base: dict[str, object] = dict(t=30.0, service="tenant-chat/chat", gpu="H100",
                                   offered_rps=7.25, request_rate=6.5, replicas=3, ready=2,
                                   desired=3, batch_limit=48, e2e_ms=7200.0, ttft_ms=310.0,
                                   jitter=0.12, targets=TARGETS, slo_state=C.SLO_MISSED,
                                   decisions=(Decision("t", 3, 48, "ScaleOut",
                                                       "P99 7200 ms above 6000 ms"),))
    base.update(kw)
    return Sample(**base)  # type: ignore[arg-type]


def test_row_shows_load_replicas_limit_latencies_state_and_decision() -> None:
    out = text_of(render([make()], Header(30.0, 120.0, 165.0, 20.0,
                                          "tenant-chat/chat <- azure-conv")))
    for want in ("tenant-chat/chat", "H100", "7.2 (6.5)", "2/3", "48", "7200 / 6000",
                 "310 / 500", "0.12 / 0.20", C.SLO_MISSED, "ScaleOut: P99 7200 ms above 6000 ms",
                 "x20", "azure-conv"):
        assert want in out, want


def test_value_above_target_is_red_and_within_is_green() -> None:
    assert versus(7200.0, 6000.0).style == "bold red"
    assert versus(5000.0, 6000.0).style == "green"
    missing = versus(None, 6000.0)
    assert isinstance(missing, Text) and missing.plain == "- / 6000"


def test_header_says_when_the_replay_is_over() -> None:
    assert "replaying" in text_of(render([], Header(59.0, 60.0, 105.0, 10.0, "x")))
    assert "cool-down" in text_of(render([], Header(61.0, 60.0, 105.0, 10.0, "x")))


def test_summary_table_has_the_counts() -> None:
    samples = [make(t=0.0, decisions=(Decision("t1", 1, 64, "Initial", ""),)),
               make(t=1.0, decisions=(Decision("t1", 1, 64, "Initial", ""),
                                      Decision("t2", 3, 32, "ScaleOut", "")))]
    client = {"tenant-chat/chat": {"ok": 9, "requests": 10,
                                   "windows": {"windows": 6, "good": 5}}}
    out = text_of(summary_table(summarize(samples), client))
    row = next(line for line in out.splitlines() if "tenant-chat/chat" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    # service, GPU, scale-outs, scale-ins, limit changes, replicas, replica-s, live limit
    assert cells[:8] == ["tenant-chat/chat", "H100", "1", "0", "1", "2..2", "2", "48..48"]
    # ... client-judged windows good, requests answered / sent
    assert cells[-2:] == ["5/6", "9/10"]
    bare = text_of(summary_table(summarize(samples), {"tenant-chat/chat": {"ok": 9}}))
    row = next(line for line in bare.splitlines() if "tenant-chat/chat" in line)
    assert [c.strip() for c in row.split("│") if c.strip()][-2:] == ["-", "9/0"]


def test_long_decision_message_is_cut_not_wrapped() -> None:
    d = Decision("t", 3, 48, "SLOViolated", "load 20 req/s " * 40)
    out = text_of(render([make(decisions=(d,))], Header(1.0, 60.0, 105.0, 20.0, "x")))
    assert sum("tenant-chat/chat" in line for line in out.splitlines()) == 1
    assert "SLOViolated: load 20 req/s" in out and "…" in out
    assert len([ln for ln in out.splitlines() if "load 20" in ln]) <= 2
