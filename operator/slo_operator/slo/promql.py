"""PromQL for the SLO loop: a fixed set of queries per cycle, whatever the number of services.

Scrape contract (what the operator's Prometheus configuration must give every pod target):
the labels ``namespace``, ``pod``, ``service`` (the value of the pod's
``inference.slo-operator.io/service`` label, i.e. the InferenceService name) and ``tenant``.
Every query aggregates ``by (namespace, service)`` and so answers for all services at
once. The gateway's own ``tenant`` label clashes with the target's and is renamed
``exported_tenant`` by Prometheus; the loop never groups by it.

Prometheus computes the latency percentiles (``histogram_quantile``) so a latency
query answers a few rows per service, not one per bucket (tens of thousands of rows at
1,000 services: docs/scale.md). Percentiles differ per policy: each latency query holds one
sub-expression per distinct percentile (at most ``MAX_QUANTILES``; a further one is read at
the nearest measured percentile above it, never below), tagged with a ``quantile`` label,
and one for the observation rate (the ``+Inf`` bucket, tagged ``quantile="count"``) that
tells which source has samples. The ``decode`` query alone returns bucket rates by ``le``:
the jitter bound (``slo.histogram.cv_lower_bound``) needs the buckets; it returns them
for one source per service and window, the first with samples (PromQL's ``and on`` /
``or on``), not for every source; beside them, under ``source="answers"``, the buckets of
vLLM's generation tokens per request (the answers' tail: ``slo.histogram.quantile_floor``).
Policy windows differ too: each range query holds one sub-expression per distinct window
(at most ``MAX_WINDOWS``; further windows are measured at the nearest of those), tagged
with a ``window`` label. Alternative sources of one signal (client-visible gateway
histograms and vLLM's own; current and older vLLM names) are tagged with a ``source``
label and chosen per service in ``slo.signals``.

Demand is read where it arrives: the gateway counts every inference request before
admission (``slo_gateway_arrivals_total``), so the ``throughput`` query carries the mean
arrival rate per window next to vLLM's completions, and the ``burst`` query the highest
arrival rate between two consecutive scrapes inside each window. Pods without the gateway
have no arrival series: those signals are then absent, not zero.

What each pod really runs is read the same way: the in-pod gateway exports the launcher's
record as ``slo_runtime_engine_info`` (the settings vLLM was started with) and
``slo_runtime_engine_change`` (one series per setting the launcher changed, with its reason);
the ``engine`` query returns both per pod, tagged with a ``family`` label, and
``slo.engine_info`` reads them.

So a cycle runs exactly ``len(QUERY_NAMES)`` (10) queries, the whole budget of 10.
Label values that come from user objects (namespaces in the scope filter) pass through
``escape_label_value`` / ``regex_value`` and can never end the string they sit in.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from slo_operator.api.models import Objectives
from slo_runtime import contract as c

# The in-pod gateway's client-visible families (named in slo_runtime.contract; same
# buckets as vLLM's TTFT and e2e histograms).
GATEWAY_TTFT = c.GATEWAY_TTFT
GATEWAY_E2E = c.GATEWAY_E2E_LATENCY
GATEWAY_QUEUE_DEPTH = c.GATEWAY_QUEUE_DEPTH
GATEWAY_ARRIVALS = c.GATEWAY_ARRIVALS + c.COUNTER_SUFFIX

# The queries ``slo.signals`` reads, and the one ``slo.engine_info`` reads.
SIGNAL_QUERY_NAMES = ("e2e", "ttft", "itl", "decode", "throughput", "burst", "waiting",
                      "running", "kv")
ENGINE_QUERY = "engine"
QUERY_NAMES = (*SIGNAL_QUERY_NAMES, ENGINE_QUERY)
MAX_QUERIES = 10
MAX_WINDOWS = 4
# The latency queries whose percentiles Prometheus computes, and how many distinct
# percentiles each measures per cycle (each one is another pass over the buckets).
QUANTILE_QUERIES = ("e2e", "ttft", "itl")
MAX_QUANTILES = 4
COUNT = "count"  # the ``quantile`` label of a latency query's observation-rate rows
BY_SERVICE = "namespace, service"  # the labels every query groups by
# Scrape interval the ``burst`` query is sized for by default: the chart's PodMonitor
# default (charts/slo-operator/values.yaml, podMonitor.interval); the loop is not told the
# interval Prometheus actually uses, so a different one is passed to ``build_queries``.
SCRAPE_INTERVAL_S = 15
# The ``burst`` query's short window, in scrapes: rate() needs two samples, and a range
# of two intervals holds exactly two (Prometheus ranges are left-open), so each step reads
# the rate between two consecutive scrapes: the shortest burst the data can show. The
# subquery steps one interval, so every pair of consecutive scrapes falls inside one step's
# range (a step as long as the range would skip every other increase). A missed scrape
# leaves a step without a value, which the maximum skips. Poisson noise over one interval
# lifts the peak at low rates (sd sqrt(r * 15 s) / 15 s: 26 % of 1 req/s), which readers
# of ``arrival_peak_rate`` must allow for.
BURST_SCRAPES = 2
# The ``arrivals_recent`` rate's range: the window's last half, at least the ``burst``
# query's short window. A window's mean lags a rising load by half the window; the mean of
# its last half lags by a quarter, and meets a step up at its new level once half the
# window has passed (never above it, as a projection of the rise would be).
RECENT_SHARE = 0.5

# Sources, in order of preference (first with samples wins), per latency query.
E2E_SOURCES = (("gateway", GATEWAY_E2E), ("engine", c.E2E_LATENCY))
TTFT_SOURCES = (("gateway", GATEWAY_TTFT), ("engine", c.TTFT))
ITL_SOURCES = (
    ("engine", c.INTER_TOKEN_LATENCY),
    ("legacy", c.LEGACY_METRIC_NAMES[c.TIME_PER_OUTPUT_TOKEN]),
)
# Jitter: per-request time per output token first, per-token inter-token latency second.
DECODE_SOURCES = (("request", c.TIME_PER_OUTPUT_TOKEN), ("token", c.INTER_TOKEN_LATENCY))
# Answer lengths (generated tokens per request), carried by the ``decode`` query too, under
# their own ``source`` label: the law's end-to-end budget is set by the longest answers.
ANSWER_SOURCES = (("answers", c.REQUEST_GENERATION_TOKENS),)
THROUGHPUT_SIGNALS = (
    ("requests", c.REQUEST_SUCCESS + c.COUNTER_SUFFIX),
    ("prompt_tokens", c.PROMPT_TOKENS + c.COUNTER_SUFFIX),
    ("generation_tokens", c.GENERATION_TOKENS + c.COUNTER_SUFFIX),
    ("preemptions", c.NUM_PREEMPTIONS + c.COUNTER_SUFFIX),
    ("arrivals", GATEWAY_ARRIVALS),  # requests arriving at the gateway, before admission
    ("prefix_queries", c.PREFIX_CACHE_QUERIES + c.COUNTER_SUFFIX),  # prompt tokens looked up
    ("prefix_hits", c.PREFIX_CACHE_HITS + c.COUNTER_SUFFIX),  # prompt tokens found cached
    # vLLM's prefill time (scheduled to first token): its sum and count, for the mean.
    ("prefill_seconds", c.PREFILL_TIME + "_sum"),
    ("prefills", c.PREFILL_TIME + "_count"),
    # vLLM's inter-token latency, one observation per generated token after a request's
    # first: its sum over its count is the window's mean time per output token weighted by
    # tokens, which is what Little's law needs (``control.law``'s speed learning).
    ("token_seconds", c.INTER_TOKEN_LATENCY + "_sum"),
    ("tokens_timed", c.INTER_TOKEN_LATENCY + "_count"),
)
# The ``throughput`` query's row of arrivals over the window's last half (``recent_range_s``).
ARRIVALS_RECENT = "arrivals_recent"
WAITING_SOURCES = (("engine", c.NUM_REQUESTS_WAITING), ("gateway", GATEWAY_QUEUE_DEPTH))
KV_SOURCES = (("engine", c.KV_CACHE_USAGE), ("legacy", c.LEGACY_METRIC_NAMES[c.KV_CACHE_USAGE]))
SUM_LE = "sum"  # pseudo bucket carrying the histogram's _sum rate
# The ``engine`` query's rows: per pod, the settings it runs and the launcher's changes,
# told apart by a ``family`` label (neither family has a label of that name).
BY_POD = f"{BY_SERVICE}, pod"
ENGINE_FAMILY_INFO = "info"
ENGINE_FAMILY_CHANGE = "change"


@dataclass(frozen=True)
class Query:
    """One PromQL query of the cycle, named by the signal it reads (``e2e``, ``ttft``, ...)."""

    name: str
    expr: str


@dataclass(frozen=True)
class QueryPlan:
    """The queries of one cycle, the window label each requested window is read at, and
    per latency query the ``quantile`` label each requested percentile is read at."""

    queries: tuple[Query, ...]
    windows: Mapping[int, str]
    quantiles: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def window_label(self, seconds: float) -> str:
        """Window label a policy window of ``seconds`` is read at."""
        return self.windows.get(int(seconds)) or _nearest(int(seconds), self.windows.values())

    def quantile_label(self, query: str, percentile: float) -> str:
        """``quantile`` label the latency query ``query`` answers ``percentile`` under:
        its own, or the nearest measured one above it (the highest where none is above)."""
        want = quantile_label(percentile)
        measured = self.quantiles.get(query, {})
        return measured.get(want) or _snap_quantile(want, set(measured.values())) or want


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def escape_label_value(value: str) -> str:
    """Body of a double-quoted PromQL string holding ``value`` exactly."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", out)


def regex_value(value: str) -> str:
    """``value`` as a literal inside a PromQL (RE2) regex matcher's string."""
    return escape_label_value(re.escape(value))


def any_of(label: str, values: Iterable[str]) -> str:
    """``label=~"a|b"`` matching exactly the given values (escaped)."""
    return f'{label}=~"{"|".join(regex_value(v) for v in sorted(set(values)))}"'


def duration(seconds: int) -> str:
    """PromQL duration of whole seconds."""
    return f"{max(1, int(seconds))}s"


def recent_range_s(window_s: float, scrape_interval_s: float = SCRAPE_INTERVAL_S) -> int:
    """Seconds the ``arrivals_recent`` rate of a ``window_s`` window spans (``RECENT_SHARE``
    of it, at least two scrapes, at most the window)."""
    step = max(1, int(scrape_interval_s))
    return min(max(1, int(window_s)), max(int(window_s * RECENT_SHARE), BURST_SCRAPES * step))


def plan_windows(windows: Iterable[float]) -> dict[int, str]:
    """Map each requested window (seconds) to the window label it is measured at."""
    counts = Counter(max(1, int(w)) for w in windows)
    if not counts:
        counts[60] = 1
    chosen = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_WINDOWS]
    return {w: duration(w) if w in chosen else duration(_nearest_int(w, chosen)) for w in counts}


def percentiles_asked(objectives: Iterable[Objectives]) -> dict[str, list[float]]:
    """The percentiles these objectives ask of each latency query (``QUANTILE_QUERIES``)."""
    objs = list(objectives)
    return {"e2e": [o.e2e_percentile for o in objs],
            "ttft": [o.ttft_percentile for o in objs],
            "itl": [o.inter_token_percentile for o in objs]}


DEFAULT_PERCENTILES = percentiles_asked([Objectives()])  # the API's defaults


def quantile_label(percentile: float) -> str:
    """The ``quantile`` label (and ``histogram_quantile`` argument) of a percentile given
    as a fraction: six significant digits, so 0.99 and 0.9900000001 are one."""
    return f"{percentile:.6g}"


def plan_quantiles(percentiles: Iterable[float]) -> dict[str, str]:
    """Map each requested percentile's label to the label it is measured at: the
    ``MAX_QUANTILES`` most requested (ties: the higher) are measured, any other is read at
    the nearest measured one above it, or the highest where none is above (a latency
    target is then judged at a percentile at least as strict, never a laxer one)."""
    counts = Counter(quantile_label(p) for p in percentiles
                     if isinstance(p, (int, float)) and 0 < p < 1)
    chosen = {q for q, _ in sorted(counts.items(),
                                   key=lambda kv: (-kv[1], -float(kv[0])))[:MAX_QUANTILES]}
    return {q: q if q in chosen else (_snap_quantile(q, chosen) or q) for q in counts}


def _snap_quantile(want: str, measured: Collection[str]) -> str | None:
    if not measured:
        return None
    above = [m for m in measured if float(m) >= float(want)]
    return min(above, key=float) if above else max(measured, key=float)


def _nearest_int(w: int, chosen: Iterable[int]) -> int:
    return min(chosen, key=lambda x: (abs(math.log(w / x)), x))


def _nearest(w: int, labels: Iterable[str]) -> str:
    secs = sorted({int(x[:-1]) for x in labels}) or [60]
    return duration(_nearest_int(w, secs))


def _tag(expr: str, **labels: str) -> str:
    for k, v in labels.items():
        expr = f'label_replace({expr}, "{k}", "{escape_label_value(v)}", "", "")'
    return expr


def _or(parts: Iterable[str]) -> str:
    return " or ".join(parts)


def build_queries(windows: Iterable[float], namespaces: Collection[str] | None = None,
                  scrape_interval_s: float = SCRAPE_INTERVAL_S,
                  percentiles: Mapping[str, Iterable[float]] | None = None) -> QueryPlan:
    """The cycle's queries for services whose policy windows are ``windows`` (seconds).

    ``namespaces`` limits every query to those namespaces (an operator watching a list of
    namespaces); None means all. ``scrape_interval_s`` is the pods' scrape interval, which
    sizes the ``burst`` query's steps. ``percentiles`` are the percentiles (fractions) the
    services' objectives ask of each latency query (``QUANTILE_QUERIES``); a query not
    named reads the API's default percentile.
    """
    plan = plan_windows(windows)
    asked = dict(percentiles or {})
    quantiles = {name: plan_quantiles(asked.get(name) or DEFAULT_PERCENTILES[name])
                 for name in QUANTILE_QUERIES}
    labels = sorted(set(plan.values()), key=lambda d: int(d[:-1]))
    sel = ['namespace!=""', 'service!=""']
    if namespaces is not None:
        sel.append(any_of("namespace", namespaces) if namespaces else 'namespace="-"')
    s = "{" + ", ".join(sel) + "}"

    inf = "{" + ", ".join([*sel, 'le="+Inf"']) + "}"

    def latency(name: str, sources: tuple[tuple[str, str], ...]) -> str:
        # Per window and source: each measured percentile, then the observation rate.
        measured = sorted(set(quantiles[name].values()), key=float)
        parts = []
        for w in labels:
            for src, metric in sources:
                buckets = f"sum by ({BY_SERVICE}, le) (rate({metric}_bucket{s}[{w}]))"
                for q in measured:
                    parts.append(_tag(f"histogram_quantile({q}, {buckets})",
                                      window=w, source=src, quantile=q))
                count = f"sum by ({BY_SERVICE}) (rate({metric}_bucket{inf}[{w}]))"
                parts.append(_tag(count, window=w, source=src, quantile=COUNT))
        return _or(parts)

    def decode(sources: tuple[tuple[str, str], ...]) -> str:
        # Per window, the buckets and the _sum of the first source with samples only: a
        # source's rows are kept for the services whose observation rate is above 0 there
        # (``and on``), and a later source's only for services no earlier one answered for
        # (``or on``). The reply holds one source's rows per service, not every source's.
        parts = []
        for w in labels:
            chain = ""
            for i, (src, name) in enumerate(sources):
                rows = _or([
                    _tag(f"sum by ({BY_SERVICE}, le) (rate({name}_bucket{s}[{w}]))",
                         window=w, source=src),
                    _tag(f"sum by ({BY_SERVICE}) (rate({name}_sum{s}[{w}]))",
                         window=w, source=src, le=SUM_LE),
                ])
                if i < len(sources) - 1:
                    rows = (f"(({rows}) and on ({BY_SERVICE}) "
                            f"(sum by ({BY_SERVICE}) (rate({name}_bucket{inf}[{w}])) > 0))")
                else:
                    rows = f"({rows})"
                chain = rows if not chain else f"({chain} or on ({BY_SERVICE}) {rows})"
            parts.append(chain)
            parts.extend(_tag(f"sum by ({BY_SERVICE}, le) (rate({name}_bucket{s}[{w}]))",
                              window=w, source=src) for src, name in ANSWER_SOURCES)
        return _or(parts)

    def rates() -> str:
        recent = (
            _tag(f"sum by ({BY_SERVICE}) (rate({GATEWAY_ARRIVALS}{s}"
                 f"[{duration(recent_range_s(int(w[:-1]), scrape_interval_s))}]))",
                 window=w, signal=ARRIVALS_RECENT)
            for w in labels
        )
        return _or([
            *(_tag(f"sum by ({BY_SERVICE}) (rate({name}{s}[{w}]))", window=w, signal=sig)
              for w in labels for sig, name in THROUGHPUT_SIGNALS),
            *recent,
        ])

    def burst() -> str:
        # The arrival rate between consecutive scrapes, at every scrape step across the
        # window (a subquery), and the highest of those; a window shorter than one step
        # reads the step that ends in it.
        step = max(1, int(scrape_interval_s))
        inner = (f"sum by ({BY_SERVICE}) "
                 f"(rate({GATEWAY_ARRIVALS}{s}[{duration(BURST_SCRAPES * step)}]))")
        return _or(
            _tag(f"max_over_time({inner}[{duration(max(int(w[:-1]), step))}:{duration(step)}])",
                 window=w)
            for w in labels
        )

    running = c.NUM_REQUESTS_RUNNING
    queries = (
        Query("e2e", latency("e2e", E2E_SOURCES)),
        Query("ttft", latency("ttft", TTFT_SOURCES)),
        Query("itl", latency("itl", ITL_SOURCES)),
        Query("decode", decode(DECODE_SOURCES)),
        Query("throughput", rates()),
        Query("burst", burst()),
        Query("waiting", _or(_tag(f"sum by ({BY_SERVICE}) ({n}{s})", source=src)
                             for src, n in WAITING_SOURCES)),
        Query("running", _or([
            _tag(f"sum by ({BY_SERVICE}) ({running}{s})", stat="sum"),
            _tag(f"count by ({BY_SERVICE}) ({running}{s})", stat="pods"),
            _tag(f"max by ({BY_SERVICE}) (timestamp({running}{s}))", stat="newest"),
        ])),
        Query("kv", _or(_tag(f"max by ({BY_SERVICE}) ({n}{s})", source=src)
                        for src, n in KV_SOURCES)),
        Query(ENGINE_QUERY, _or([
            _tag(f"max by ({BY_POD}, {', '.join(c.ENGINE_INFO_LABELS)}) "
                 f"({c.RUNTIME_ENGINE_INFO}{s})", family=ENGINE_FAMILY_INFO),
            _tag(f"max by ({BY_POD}, {', '.join(c.ENGINE_CHANGE_LABELS)}) "
                 f"({c.RUNTIME_ENGINE_CHANGE}{s})", family=ENGINE_FAMILY_CHANGE),
        ])),
    )
    assert len(queries) <= MAX_QUERIES
    return QueryPlan(queries=queries, windows=plan, quantiles=quantiles)
