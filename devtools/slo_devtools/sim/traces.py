"""Benchmark workloads: public traces as arrivals with prompt and output lengths.

Sources and licenses: ``slo_devtools/data/traces/README.md``. Every transformation
(rate scaling, time compression, arrivals generated inside ServeGen's 10-minute windows,
the synthetic ramp, the long-context conversations) is seeded and returns its factors in
the :class:`Trace`, so a report can state them.

Long context (:func:`long_context`). No public trace ships per-request long prompts with
their conversations, so the workload is built from documented distributions:

* arrivals: the Azure 2023 conversation hour's timestamps (rate-scaled as
  :func:`scale_rate` does);
* conversations: every arrival is a later turn of a conversation whose next turn is due
  (oldest due first), else the first turn of a new one. After each turn a conversation
  continues with probability ``1 - 1/LONG_MEAN_TURNS`` (a geometric number of turns of
  mean 2, the mean turns per conversation of LMSYS-Chat-1M, arXiv 2309.11998);
  its next turn is due ``LONG_ANSWER_S`` (the answer's time) plus an exponential think
  time of mean ``LONG_THINK_S`` after the turn's arrival. So about half the requests are
  later turns once the hour is under way;
* a first turn's prompt (system prompt, documents, code, history brought along) is
  ``LONG_MIN_PROMPT`` + a log-normal (mu ``LONG_LOG_MU``, sigma ``LONG_LOG_SIGMA``),
  redrawn where prompt and output would not fit the context window (about 1% of draws):
  mean about 11.2k tokens, median 6.0k, p99 83k; over all turns (later turns carry their
  history) the prompts average 12.6k, median 7.7k, p99 86k; the mean
  matches the average input of Mooncake's long-context conversation trace (about 12k
  tokens; Qin et al., FAST'25, arXiv 2407.00079) and the 4k floor keeps it long-context;
* a later turn's prompt is the previous turn's prompt and output (its ``prefix``, which a
  replica's prefix cache may hold) plus a new message; new messages and outputs are drawn
  jointly from the Azure conversation trace's (prompt, output) pairs;
* prompt + output never exceed ``MAX_MODEL_LEN`` (128k, the model's context window, as
  ``--max-model-len``): a conversation that would outgrow it ends there, and the arrival
  starts a new one.
"""

from __future__ import annotations

import csv
import datetime
import heapq
import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

AZURE_FILES = {"azure-code": "azure2023_code.csv", "azure-conv": "azure2023_conv.csv"}
SERVEGEN_FILES = {"m-large": "servegen_m-large_aggregate_rate.csv",
                  "m-small": "servegen_m-small_aggregate_rate.csv"}
SERVEGEN_WINDOW_S = 600.0
# ServeGen fits per-client inter-arrival distributions; the rate-weighted median CV is ~1.2.
SERVEGEN_DEFAULT_CV = 1.2


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload: arrival (seconds from the trace start) and lengths.

    ``session`` names the conversation a request is a turn of (-1: none) and ``prefix``
    how many leading tokens of its prompt are that conversation's earlier context (the
    previous turn's prompt and output), which a replica's prefix cache may hold."""

    t: float
    prompt: int
    output: int
    tenant: str = ""
    session: int = -1
    prefix: int = 0


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival, with how they were derived from the source."""

    name: str
    requests: tuple[Request, ...]
    duration: float  # seconds covered (may exceed the last arrival)
    rate_scale: float = 1.0  # requests per source request (after time compression)
    time_compression: float = 1.0  # source seconds per trace second
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def rate_factor(self) -> float:
        """Overall request-rate factor against the source: rate_scale x time_compression."""
        return self.rate_scale * self.time_compression

    @property
    def tenants(self) -> tuple[str, ...]:
        """Tenant names in order of first appearance."""
        return tuple(dict.fromkeys(r.tenant for r in self.requests))

    def mean_rate(self) -> float:
        """Requests per second over the trace's duration."""
        return len(self.requests) / self.duration if self.duration > 0 else 0.0

    def window_rates(self, window_s: float = 60.0) -> list[float]:
        """Arrival rate (req/s) per window from the trace start."""
        n = max(1, math.ceil(self.duration / window_s))
        counts = [0] * n
        for r in self.requests:
            counts[min(n - 1, int(r.t // window_s))] += 1
        return [c / window_s for c in counts]


def _data_dir() -> Path:
    return Path(str(resources.files("slo_devtools") / "data" / "traces"))


def _seconds(stamp: str) -> float:
    """'2023-11-16 18:17:03.9799600' -> seconds since that day's 00:00 of year 1."""
    day, clock = stamp.strip().split(" ")
    y, mo, d = (int(x) for x in day.split("-"))
    h, mi, s = clock.split(":")
    return (datetime.date(y, mo, d).toordinal() * 86400.0 + int(h) * 3600.0 + int(mi) * 60.0
            + float(s))


def read_azure(name: str) -> list[Request]:
    """The Azure 2023 trace ``azure-code`` or ``azure-conv`` unchanged (t from first arrival)."""
    if name not in AZURE_FILES:
        raise ValueError(f"trace: unknown Azure trace {name!r}; known: {sorted(AZURE_FILES)}")
    rows: list[tuple[float, int, int]] = []
    with (_data_dir() / AZURE_FILES[name]).open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append((_seconds(row["TIMESTAMP"]), int(row["ContextTokens"]),
                         int(row["GeneratedTokens"])))
    rows.sort()
    t0 = rows[0][0]
    return [Request(t - t0, max(1, p), max(1, o), name) for t, p, o in rows]


def scale_rate(requests: Sequence[Request], factor: float, rng: random.Random,
               horizon: float) -> list[Request]:
    """Scale the request rate by ``factor`` keeping the trace's shape at second scale.

    Each request is kept ``floor(factor)`` times plus once more with probability
    ``frac(factor)`` (so ``factor < 1`` thins the trace). The first copy keeps its arrival;
    extra copies arrive uniformly between it and the next source arrival, so bursts stay
    bursts and idle gaps stay idle.
    """
    if factor <= 0:
        raise ValueError(f"rate_scale: must be > 0, got {factor}")
    out: list[Request] = []
    whole, frac = int(factor), factor - int(factor)
    for i, r in enumerate(requests):
        nxt = requests[i + 1].t if i + 1 < len(requests) else horizon
        copies = whole + (1 if rng.random() < frac else 0)
        for k in range(copies):
            t = r.t if k == 0 else r.t + rng.random() * max(0.0, nxt - r.t)
            out.append(replace(r, t=t))
    out.sort(key=lambda q: q.t)
    return out


def azure(name: str, *, rate_scale: float = 1.0, time_compression: float = 1.0,
          seed: int = 0, tenant: str | None = None) -> Trace:
    """An Azure 2023 trace, rate-scaled (see :func:`scale_rate`) and time-compressed."""
    if time_compression <= 0:
        raise ValueError(f"time_compression: must be > 0, got {time_compression}")
    src = read_azure(name)
    horizon = src[-1].t + 1.0
    reqs = scale_rate(src, rate_scale, random.Random(seed), horizon) \
        if rate_scale != 1.0 else src
    reqs = [Request(r.t / time_compression, r.prompt, r.output, tenant or name) for r in reqs]
    notes = [f"{name}: Azure LLM inference trace 2023 (CC-BY 4.0)"]
    if rate_scale != 1.0:
        notes.append(f"{name}: rate x{rate_scale:g} (copies placed between source arrivals)")
    if time_compression != 1.0:
        notes.append(f"{name}: time compressed x{time_compression:g}")
    return Trace(name, tuple(reqs), horizon / time_compression, rate_scale, time_compression,
                 tuple(notes))


def merge(name: str, traces: Iterable[Trace]) -> Trace:
    """Several tenants' traces replayed together (requests keep their tenant)."""
    ts = list(traces)
    reqs = sorted((r for t in ts for r in t.requests), key=lambda q: q.t)
    scales = {t.rate_scale for t in ts}
    comps = {t.time_compression for t in ts}
    return Trace(name, tuple(reqs), max(t.duration for t in ts),
                 scales.pop() if len(scales) == 1 else float("nan"),
                 comps.pop() if len(comps) == 1 else float("nan"),
                 tuple(n for t in ts for n in t.notes))


def read_servegen(kind: str = "m-large") -> list[tuple[float, float]]:
    """ServeGen's aggregate (window_start_s, requests/s) rows for ``m-large`` or ``m-small``."""
    if kind not in SERVEGEN_FILES:
        raise ValueError(f"trace: unknown ServeGen set {kind!r}; known: {sorted(SERVEGEN_FILES)}")
    with (_data_dir() / SERVEGEN_FILES[kind]).open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    return [(float(a), float(b)) for a, b in rows]


def gamma_arrivals(rates: Sequence[float], window_s: float, cv: float,
                   rng: random.Random) -> list[float]:
    """Arrival times of a Gamma renewal process whose rate is piecewise constant per window.

    Inter-arrival ~ Gamma(shape 1/cv^2, mean 1/rate); cv=1 is Poisson. A gap that crosses a
    window boundary is redrawn from the boundary at the next window's rate (the process is
    restarted, which keeps each window's mean rate exact in expectation).
    """
    if cv <= 0:
        raise ValueError(f"cv: must be > 0, got {cv}")
    shape = 1.0 / (cv * cv)
    out: list[float] = []
    for i, rate in enumerate(rates):
        start, end = i * window_s, (i + 1) * window_s
        if rate <= 0:
            continue
        # A stationary renewal process starts with a forward-recurrence gap; a plain gap
        # drawn from the window start is a close, simpler approximation.
        t = start + rng.gammavariate(shape, 1.0 / (rate * shape))
        while t < end:
            out.append(t)
            t += rng.gammavariate(shape, 1.0 / (rate * shape))
    return out


def length_sampler(source: str = "azure-conv") -> list[tuple[int, int]]:
    """(prompt, output) pairs to draw request lengths from, jointly (correlation kept)."""
    return [(r.prompt, r.output) for r in read_azure(source)]


def servegen_day(kind: str = "m-large", day: int = 0, *, peak_rate: float = 20.0,
                 time_compression: float = 1.0, cv: float = SERVEGEN_DEFAULT_CV,
                 lengths: str = "azure-conv", seed: int = 0, tenant: str = "servegen"
                 ) -> Trace:
    """One day of ServeGen's aggregate rate, scaled so its busiest window is ``peak_rate``.

    Arrivals inside each 10-minute window follow :func:`gamma_arrivals`; lengths are drawn
    jointly from ``lengths`` (an Azure trace; ServeGen publishes no per-request lengths in
    the aggregate files). ``time_compression`` shortens every window by that factor.
    """
    rows = [r for t, r in read_servegen(kind) if day * 86400 <= t < (day + 1) * 86400]
    if not rows:
        raise ValueError(f"day: ServeGen {kind} has no day {day}")
    scale = peak_rate / max(rows)
    rng = random.Random(seed)
    window = SERVEGEN_WINDOW_S / time_compression
    times = gamma_arrivals([r * scale for r in rows], window, cv, rng)
    pairs = length_sampler(lengths)
    reqs = tuple(Request(t, *pairs[rng.randrange(len(pairs))], tenant) for t in times)
    notes = (f"ServeGen {kind} day {day} (Apache-2.0): rate x{scale:.4g} "
             f"(busiest 10-min window -> {peak_rate:g} req/s)",
             f"arrivals: Gamma renewal, CV {cv:g}, seed {seed}; lengths drawn from {lengths}",
             f"time compressed x{time_compression:g} (10-min windows -> {window:g} s)")
    return Trace(f"servegen-{kind}-day{day}", reqs, len(rows) * window, scale,
                 time_compression, notes)


# Long-context conversations (module docstring).
MAX_MODEL_LEN = 131072  # Llama-3.1's 128k context window (--max-model-len)
LONG_MIN_PROMPT = 4096
LONG_LOG_MU = 7.6  # with sigma: mean ~11.1k, p99 ~83k tokens after the 4k shift and
# the truncation at the context window
LONG_LOG_SIGMA = 1.8
LONG_MEAN_TURNS = 2.0
LONG_ANSWER_S = 20.0  # the answer's time before the user reads it (the e2e objective)
LONG_THINK_S = 60.0


def long_context(*, rate_scale: float = 1.0, seed: int = 0, tenant: str = "long-context",
                 mean_turns: float = LONG_MEAN_TURNS, think_s: float = LONG_THINK_S
                 ) -> Trace:
    """Long-context conversations on the Azure conversation hour's arrivals, with shared
    prefixes (see the module docstring for the model and its sources)."""
    if mean_turns < 1:
        raise ValueError(f"mean_turns: must be >= 1, got {mean_turns}")
    rng = random.Random(seed)
    base = azure("azure-conv", rate_scale=rate_scale, seed=seed)
    pairs = length_sampler("azure-conv")
    go_on = 1.0 - 1.0 / mean_turns
    due: list[tuple[float, int]] = []  # (time the next turn is due, conversation)
    context: dict[int, int] = {}  # conversation -> tokens so far (prompt + output)
    sessions = itertools.count()
    out: list[Request] = []
    for r in base.requests:
        msg, answer = pairs[rng.randrange(len(pairs))]
        sid = -1
        while due and due[0][0] <= r.t:
            _, s = heapq.heappop(due)
            if context[s] + msg < MAX_MODEL_LEN:  # room for one output token
                sid = s
                break
            del context[s]  # the context window is full: the conversation ends
        if sid < 0:
            sid = next(sessions)
            prefix = 0
            prompt = MAX_MODEL_LEN
            while prompt + answer > MAX_MODEL_LEN:  # truncated at the context window
                prompt = LONG_MIN_PROMPT + int(rng.lognormvariate(LONG_LOG_MU, LONG_LOG_SIGMA))
        else:
            prefix = context[sid]
            prompt = prefix + msg
        output = max(1, min(answer, MAX_MODEL_LEN - prompt))
        out.append(Request(r.t, prompt, output, tenant, sid, prefix))
        if rng.random() < go_on:
            context[sid] = prompt + output
            heapq.heappush(due, (r.t + LONG_ANSWER_S + rng.expovariate(1.0 / think_s), sid))
        else:
            context.pop(sid, None)
    later = sum(1 for q in out if q.prefix) / max(1, len(out))
    notes = (*base.notes,
             f"long-context conversations, seed {seed}: first-turn prompt {LONG_MIN_PROMPT} + "
             f"log-normal(mu {LONG_LOG_MU}, sigma {LONG_LOG_SIGMA}) tokens, mean {mean_turns:g} "
             f"turns per conversation, think time {LONG_ANSWER_S:g} s + exp(mean {think_s:g} s); "
             f"{later * 100:.0f}% of requests are later turns reusing the previous turn as "
             f"prefix; max context {MAX_MODEL_LEN}",)
    return Trace("long-context", tuple(out), base.duration, base.rate_scale,
                 base.time_compression, notes)


# The llm-d autoscaling experiment ramps 2 -> 10 -> 1 requests/s. Phases (seconds, rate at
# the phase start, rate at its end), linear inside a phase.
RAMP_PHASES: tuple[tuple[float, float, float], ...] = (
    (600.0, 2.0, 2.0), (600.0, 2.0, 10.0), (1200.0, 10.0, 10.0), (600.0, 10.0, 1.0),
    (600.0, 1.0, 1.0),
)


def ramp(*, rate_scale: float = 1.0, phases: Sequence[tuple[float, float, float]] = RAMP_PHASES,
         lengths: str = "azure-conv", seed: int = 0, tenant: str = "ramp") -> Trace:
    """A piecewise-linear Poisson ramp (default 2 -> 10 -> 1 req/s over 60 min) x rate_scale.

    Non-homogeneous Poisson arrivals by thinning (Lewis-Shedler), lengths drawn jointly from
    ``lengths``.
    """
    rng = random.Random(seed)
    pairs = length_sampler(lengths)
    out: list[Request] = []
    start = 0.0
    for dur, r0, r1 in phases:
        top = max(r0, r1) * rate_scale
        t = start
        while top > 0:
            t += rng.expovariate(top)
            if t >= start + dur:
                break
            rate = (r0 + (r1 - r0) * (t - start) / dur) * rate_scale
            if rng.random() * top <= rate:
                out.append(Request(t, *pairs[rng.randrange(len(pairs))], tenant))
        start += dur
    levels = " -> ".join(f"{r0 * rate_scale:g}" for _, r0, _ in phases[:1]) + "".join(
        f" -> {r1 * rate_scale:g}" for _, r0, r1 in phases if r1 != r0)
    notes = (f"ramp {levels} req/s (x{rate_scale:g} of llm-d's 2 -> 10 -> 1), Poisson, "
             f"seed {seed}; lengths drawn from {lengths}",)
    return Trace("ramp", tuple(out), start, rate_scale, 1.0, notes)
