"""Query results -> per-service ``Signals`` with a typed ``MetricsState`` (pure).

Input is what the Prometheus HTTP API returns for an instant query (a list of
``{"metric": {labels}, "value": [ts, "str"]}``), per query name of ``promql.QueryPlan``;
``None`` for a query that failed. Rules (docs/slo-loop.md, "Signals"):

- a value that is NaN, +-Inf or unparsable is "not observed" (``None``), never zero;
- a service with no series in any query is ``Empty``; one whose newest sample is older
  than ``stale_after`` seconds is ``Stale``; every query failed: ``Unavailable``;
- no finished request, nothing waiting or running: ``NoTraffic`` (latencies ``None``);
- a required signal missing (a failed query, or traffic without latency samples):
  ``Partial``, with the missing names in the message;
- latency comes from the gateway's client-visible histograms when they have samples in
  the window (an observation rate above 0), else from vLLM's own (which miss the wait in
  the gateway queue); Prometheus computes the percentile (``promql``), read here at the
  label the plan measures the policy's percentile under;
- demand as it arrives (``arrival_rate``, ``arrival_peak_rate``) comes from the gateway's
  arrival counter only: without it (pods without the gateway) both are ``None``; the peak
  is never below the window's mean (the short steps tile the window);
- ``prefix_hit_share`` is prefix-cache hits over lookups (prompt tokens), in 0..1, ``None``
  when nothing was looked up; ``decode_mean_ms`` is vLLM's inter-token latency sum rate
  over its count rate (a mean over generated tokens), else the decode histogram's sum rate
  over its count rate (the ``+Inf`` bucket) for the source the jitter reads;
  ``prefill_mean_ms`` is vLLM's prefill time (scheduled to first token) sum rate over its
  count rate, ``None`` while no prefill finished;
- ``answer_tail_tokens`` is a length the answers' percentile at the policy's end-to-end
  percentile is not below: the lower bound of the generation-token bucket holding that
  rank (``histogram.quantile_floor``; vLLM's buckets are 1, 2, 5, 10, ... tokens wide).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slo_operator.api.models import Objectives
from slo_operator.api.observe import MetricsState, ServiceKey, Signals
from slo_operator.slo import histogram
from slo_operator.slo.promql import (
    ANSWER_SOURCES,
    ARRIVALS_RECENT,
    COUNT,
    DECODE_SOURCES,
    E2E_SOURCES,
    ITL_SOURCES,
    KV_SOURCES,
    SIGNAL_QUERY_NAMES,
    SUM_LE,
    TTFT_SOURCES,
    QueryPlan,
)

DEFAULT_STALE_AFTER = 120.0
# A query's reply: its result list as Prometheus sends it, or already indexed
# (``digest``); None for a query that failed.
Result = Sequence[Mapping[str, Any]] | Mapping[ServiceKey, Any] | None


@dataclass(frozen=True)
class SignalSpec:
    """What one service's policy asks of its signals."""

    window_s: float = 60.0
    e2e_percentile: float = 0.99
    ttft_percentile: float = 0.95
    itl_percentile: float = 0.99
    itl_required: bool = False
    # Value of the pods' service label when it differs from the service name (names over
    # 63 characters are shortened to a valid label value).
    service_label: str | None = None


def spec_for(objectives: Objectives, window_s: float,
             service_label: str | None = None) -> SignalSpec:
    """Signal needs of a policy's objectives and window."""
    return SignalSpec(
        service_label=service_label,
        window_s=window_s,
        e2e_percentile=objectives.e2e_percentile,
        ttft_percentile=objectives.ttft_percentile,
        itl_percentile=objectives.inter_token_percentile,
        itl_required=objectives.inter_token_latency_ms is not None,
    )


def number(raw: Any) -> float | None:
    """A finite float from a Prometheus sample value, else None (NaN, Inf, garbage)."""
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@dataclass(frozen=True, slots=True)
class _Row:
    labels: Mapping[str, str]  # the series' labels but namespace and service (the key)
    ts: float | None
    value: float | None


_KEY_LABELS = frozenset({"namespace", "service"})


class Indexed(dict[ServiceKey, list["_Row"]]):
    """A signal query's reply already indexed per service (:func:`digest`)."""


def digest(name: str, result: Any) -> Any:
    """A signal query's reply indexed as soon as it arrives (in the query's thread), so
    the decoded JSON of the pass's large histogram replies is not all alive at once;
    any other reply as it is. ``parse_signals`` reads either form."""
    if name in SIGNAL_QUERY_NAMES and result is not None and not isinstance(result, Indexed):
        return Indexed(_index(result))
    return result


def _index(result: Result) -> dict[ServiceKey, list[_Row]]:
    """Rows per service. The histogram queries answer one series per service, window,
    source and bucket (tens of thousands at 1,000 services) whose other labels repeat
    from service to service: each distinct label set is kept once and shared by its rows
    (docs/scale.md, "Memory")."""
    if isinstance(result, Indexed):
        return result
    out: dict[ServiceKey, list[_Row]] = defaultdict(list)
    shared: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    for item in result or ():
        if not isinstance(item, Mapping):
            continue
        labels = item.get("metric")
        value = item.get("value")
        if not isinstance(labels, Mapping) or not isinstance(value, Sequence) or len(value) != 2:
            continue
        ns, svc = labels.get("namespace"), labels.get("service")
        if not isinstance(ns, str) or not isinstance(svc, str) or not ns or not svc:
            continue
        rest = tuple((str(k), str(v)) for k, v in labels.items() if k not in _KEY_LABELS)
        common = shared.get(rest)
        if common is None:
            common = shared[rest] = dict(rest)
        out[ServiceKey(ns, svc)].append(_Row(common, number(value[0]), number(value[1])))
    return out


def _le(raw: str) -> float | None:
    if raw == SUM_LE:
        return None
    try:
        return float(raw)  # "+Inf" parses to inf
    except ValueError:
        return None


def _histogram(rows: Iterable[_Row], window: str, sources: Sequence[tuple[str, str]]
               ) -> tuple[str, list[tuple[float, float]], float | None] | None:
    """(source, buckets, sum rate) of the first source with samples; None if none has any."""
    by_src: dict[str, list[tuple[float, float]]] = defaultdict(list)
    sums: dict[str, float | None] = {}
    for r in rows:
        if r.labels.get("window") != window:
            continue
        src = r.labels.get("source", "")
        if r.labels.get("le") == SUM_LE:
            sums[src] = r.value
            continue
        le = _le(r.labels.get("le", ""))
        if le is not None and r.value is not None:
            by_src[src].append((le, r.value))
    for src, _ in sources:
        b = by_src.get(src, [])
        if max((v for le, v in b if math.isinf(le)), default=0.0) > 0:
            return src, b, sums.get(src)
    return None


def _latency(rows: Iterable[_Row], window: str, quantile: str,
             sources: Sequence[tuple[str, str]]) -> tuple[str, float | None] | None:
    """(source, percentile in ms) of the first source with an observation rate above 0 in
    ``window``; the percentile None where Prometheus had none (NaN) or it is negative;
    None where no source has samples."""
    counts: dict[str, float] = {}
    values: dict[str, float] = {}
    for r in rows:
        if r.labels.get("window") != window or r.value is None:
            continue
        q = r.labels.get("quantile")
        if q == COUNT:
            counts[r.labels.get("source", "")] = r.value
        elif q == quantile:
            values[r.labels.get("source", "")] = r.value
    for src, _ in sources:
        if counts.get(src, 0.0) > 0:
            v = values.get(src)
            return src, (None if v is None or v < 0 else v * 1000.0)
    return None


def _pick(rows: Iterable[_Row], key: str, value: str, window: str | None = None) -> float | None:
    vals = [r.value for r in rows
            if r.labels.get(key) == value and (window is None or r.labels.get("window") == window)]
    finite = [v for v in vals if v is not None]
    return finite[0] if finite else None


def parse_signals(
    plan: QueryPlan,
    results: Mapping[str, Result],
    services: Mapping[ServiceKey, SignalSpec],
    now: float,
    stale_after: float = DEFAULT_STALE_AFTER,
) -> dict[ServiceKey, Signals]:
    """Signals of every service in ``services`` from one cycle's query results."""
    failed = [n for n in SIGNAL_QUERY_NAMES if results.get(n) is None]
    if len(failed) == len(SIGNAL_QUERY_NAMES):
        sig = Signals(state=MetricsState.UNAVAILABLE, message="every Prometheus query failed")
        return dict.fromkeys(services, sig)
    idx = {n: _index(results.get(n)) for n in SIGNAL_QUERY_NAMES}
    return {key: _one(key, spec, plan, idx, failed, now, stale_after)
            for key, spec in services.items()}


def _one(key: ServiceKey, spec: SignalSpec, plan: QueryPlan,
         idx: Mapping[str, Mapping[ServiceKey, list[_Row]]], failed: Sequence[str],
         now: float, stale_after: float) -> Signals:
    series = ServiceKey(key.namespace, spec.service_label or key.name)
    rows = {n: idx[n].get(series, []) for n in SIGNAL_QUERY_NAMES}
    if not any(rows.values()):
        why = f"no series for {key}"
        if failed:
            why += f" (failed queries: {', '.join(failed)})"
        return Signals(state=MetricsState.EMPTY, message=why)
    w = plan.window_label(spec.window_s)

    newest = _pick(rows["running"], "stat", "newest")
    stamps = [r.ts for rs in rows.values() for r in rs if r.ts is not None]
    evaluated = max(stamps) if stamps else None
    sample_time = newest if newest is not None else evaluated
    if sample_time is not None and now - sample_time > stale_after:
        return Signals(state=MetricsState.STALE, sample_time=sample_time,
                       message=f"newest sample is {now - sample_time:.0f}s old "
                               f"(bound {stale_after:.0f}s)")

    e2e = _latency(rows["e2e"], w, plan.quantile_label("e2e", spec.e2e_percentile),
                   E2E_SOURCES)
    ttft = _latency(rows["ttft"], w, plan.quantile_label("ttft", spec.ttft_percentile),
                    TTFT_SOURCES)
    itl = _latency(rows["itl"], w, plan.quantile_label("itl", spec.itl_percentile),
                   ITL_SOURCES)
    decode_h = _histogram(rows["decode"], w, DECODE_SOURCES)
    jitter = None
    if decode_h is not None and decode_h[2] is not None:
        jitter = histogram.cv_lower_bound(decode_h[1], decode_h[2])
    decode_mean_ms = _decode_mean_ms(decode_h)
    answers_h = _histogram(rows["decode"], w, ANSWER_SOURCES)
    answer_tail = None if answers_h is None \
        else histogram.quantile_floor(spec.e2e_percentile, answers_h[1])

    tp = rows["throughput"]
    request_rate = _pick(tp, "signal", "requests", w)
    arrival_rate = _pick(tp, "signal", "arrivals", w)
    arrival_recent_rate = _pick(tp, "signal", ARRIVALS_RECENT, w)
    arrival_peak_rate = _pick(rows["burst"], "window", w)
    if arrival_peak_rate is not None and arrival_rate is not None:
        arrival_peak_rate = max(arrival_peak_rate, arrival_rate)
    waiting_parts = [r.value for r in rows["waiting"] if r.value is not None]
    waiting = sum(waiting_parts) if waiting_parts else None
    running = _pick(rows["running"], "stat", "sum")
    pods = _pick(rows["running"], "stat", "pods")
    kv = None
    for src, _ in KV_SOURCES:
        kv = _pick(rows["kv"], "source", src)
        if kv is not None:
            break

    sig = Signals(
        e2e_ms=None if e2e is None else e2e[1],
        ttft_ms=None if ttft is None else ttft[1],
        itl_ms=None if itl is None else itl[1],
        jitter=jitter,
        request_rate=request_rate,
        prompt_tokens_rate=_pick(tp, "signal", "prompt_tokens", w),
        generation_tokens_rate=_pick(tp, "signal", "generation_tokens", w),
        waiting=waiting,
        running=running,
        kv_usage=kv,
        preemptions_rate=_pick(tp, "signal", "preemptions", w),
        sample_time=sample_time,
        pods=None if pods is None else int(pods),
        latency_source=(e2e or ttft or ("", None))[0],
        arrival_rate=arrival_rate,
        arrival_recent_rate=arrival_recent_rate,
        arrival_peak_rate=arrival_peak_rate,
        prefix_hit_share=_share(_pick(tp, "signal", "prefix_hits", w),
                                _pick(tp, "signal", "prefix_queries", w)),
        decode_mean_ms=_mean_ms(_pick(tp, "signal", "token_seconds", w),
                                _pick(tp, "signal", "tokens_timed", w)) or decode_mean_ms,
        prefill_mean_ms=_mean_ms(_pick(tp, "signal", "prefill_seconds", w),
                                 _pick(tp, "signal", "prefills", w)),
        answer_tail_tokens=answer_tail,
    )
    idle = (request_rate is None or request_rate == 0) and not waiting and not running
    if idle and request_rate is not None:
        return _with(sig, MetricsState.NO_TRAFFIC, f"no request finished in the last {w}")
    missing = [n for n, v in (("request rate", request_rate), ("waiting", waiting),
                              ("running", running)) if v is None]
    if request_rate:
        missing += [n for n, v in (("e2e latency", sig.e2e_ms), ("TTFT", sig.ttft_ms))
                    if v is None]
        if spec.itl_required and sig.itl_ms is None:
            missing.append("inter-token latency")
    if missing:
        why = "missing: " + ", ".join(missing)
        if failed:
            why += f" (failed queries: {', '.join(failed)})"
        return _with(sig, MetricsState.PARTIAL, why)
    return _with(sig, MetricsState.OK, f"latency from {sig.latency_source or 'no samples'}")


def _decode_mean_ms(h: tuple[str, list[tuple[float, float]], float | None] | None
                    ) -> float | None:
    """Mean of the decode histogram: its sum rate over its count rate (the ``+Inf``
    bucket's rate is the count's, and ``_histogram`` only returns a source where it is
    above 0)."""
    if h is None:
        return None
    return _mean_ms(h[2], max((v for le, v in h[1] if math.isinf(le)), default=0.0))


def _mean_ms(seconds: float | None, count: float | None) -> float | None:
    """Mean of a histogram in milliseconds from its sum and count rates; None when either
    is unknown, the count is 0 or the sum negative."""
    if seconds is None or count is None or count <= 0 or seconds < 0:
        return None
    mean = seconds / count * 1000.0
    return mean if math.isfinite(mean) else None


def _share(part: float | None, whole: float | None) -> float | None:
    """``part / whole`` in 0..1 (two rates extrapolated apart may overshoot a little);
    None when either is unknown or ``whole`` is 0."""
    if part is None or whole is None or whole <= 0:
        return None
    return min(1.0, max(0.0, part / whole))


def _with(sig: Signals, state: MetricsState, message: str) -> Signals:
    return replace(sig, state=state, message=message)
