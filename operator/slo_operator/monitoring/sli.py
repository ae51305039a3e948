"""The SLO signals the generated rules record, one expression per signal for all services.

Each expression groups by ``(namespace, service)`` so one rule covers every service a
policy binds. The gateway's histograms (``slo_gateway_*``, admission queue included) are
preferred; vLLM's own histograms are the fallback where the gateway is not in the path
(``A or B`` keeps B's series only for services A has none for).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slo_operator.api.models import SLOPolicySpec
from slo_operator.slo import promql
from slo_runtime import contract

BY = "namespace, service"


def escape(value: str) -> str:
    """A label value inside double quotes in PromQL."""
    return promql.escape_label_value(value)


def service_selector(namespace: str, services: Sequence[str] = ()) -> str:
    """Label matchers for the services bound to a policy (all in its namespace if none known)."""
    sel = f'namespace="{escape(namespace)}"'
    if services:
        sel += "," + promql.any_of("service", services)
    return sel


def _names(sources: Sequence[tuple[str, str]]) -> list[str]:
    # The SLO loop's own sources, in its order of preference (slo.promql).
    return [name for _, name in sources]


def _quantile(q: float, metrics: Sequence[str]) -> Callable[[str, str], str]:
    def expr(sel: str, window: str) -> str:
        return "\nor\n".join(
            f"histogram_quantile({q:g}, sum by ({BY}, le) (rate({m}_bucket{{{sel}}}[{window}])))"
            for m in metrics
        )
    return expr


# Both decode sources (per-request time per output token, inter-token latency) share
# vLLM's inter-token buckets; the jitter rule needs them spelled out.
DECODE_BUCKETS = contract.HISTOGRAM_BUCKETS[contract.TIME_PER_OUTPUT_TOKEN]
assert all(contract.HISTOGRAM_BUCKETS.get(n) == DECODE_BUCKETS
           for n in _names(promql.DECODE_SOURCES) if n in contract.HISTOGRAM_BUCKETS)
DECODE_RATE = "slo_operator:decode_seconds_bucket:rate"
DECODE_MEAN = "slo_operator:decode_seconds:mean"


def _first_with_traffic(parts: Sequence[tuple[str, str]]) -> str:
    # Like the loop (slo.signals): a source counts only where it saw requests finish.
    return "\nor\n".join(f"({expr} and on ({BY}) ({count} > 0))" for expr, count in parts)


def _decode_rate(sel: str, window: str) -> str:
    return _first_with_traffic([
        (f"sum by ({BY}, le) (rate({name}_bucket{{{sel}}}[{window}]))",
         f"sum by ({BY}) (rate({name}_count{{{sel}}}[{window}]))")
        for name in _names(promql.DECODE_SOURCES)])


def _decode_mean(sel: str, window: str) -> str:
    return _first_with_traffic([
        (f"sum by ({BY}) (rate({name}_sum{{{sel}}}[{window}]))"
         f" / sum by ({BY}) (rate({name}_count{{{sel}}}[{window}]))",
         f"sum by ({BY}) (rate({name}_count{{{sel}}}[{window}]))")
        for name in _names(promql.DECODE_SOURCES)])


def _le_matcher(bound: float) -> str:
    # Prometheus 2 keeps the client's "1.0"; Prometheus 3 normalises it to "1".
    text = f"{bound:g}".replace(".", "\\\\.")
    return f'le=~"{text}(\\\\.0)?"' if float(bound).is_integer() else f'le=~"{text}"'


def jitter_expr(policy_matcher: str, bounds: Sequence[float]) -> str:
    """Lower bound of the decode-time CV, from recorded bucket rates and mean.

    The same estimate as the loop (``slo.histogram.cv_lower_bound``): every observation in
    bucket ``(lo, hi]`` is at least its distance from the mean to that interval away from
    the mean, so coarse buckets read as no spread rather than an invented one.
    """
    rate = f"{DECODE_RATE}{{{policy_matcher},"
    mean = f"{DECODE_MEAN}{{{policy_matcher}}}"
    edges = [0.0, *bounds]
    terms = []
    for lo, hi in zip(edges, [*bounds, math.inf], strict=True):
        upper = f'{rate}le="+Inf"}}' if math.isinf(hi) else f"{rate}{_le_matcher(hi)}}}"
        count = (f"sum without (le) ({upper})" if lo == 0 else
                 f"sum without (le) ({upper} - ignoring (le) {rate}{_le_matcher(lo)}}})")
        dist = f"clamp_min({lo:g} - {mean}, 0)"
        if not math.isinf(hi):
            dist += f" + clamp_min({mean} - {hi:g}, 0)"
        terms.append(f"{count} * ({dist}) ^ 2")
    total = f'sum without (le) ({rate}le="+Inf"}})'
    return "sqrt((\n  " + "\n+ ".join(terms) + f"\n) / {total}) / {mean}"


def _request_rate(sel: str, window: str) -> str:
    return "\nor\n".join(f"sum by ({BY}) (rate({name}_count{{{sel}}}[{window}]))"
                          for name in _names(promql.E2E_SOURCES))


@dataclass(frozen=True)
class Signal:
    """One recorded signal: ``record`` name, extra labels, and its expression builder."""

    name: str
    record: str
    expr: Callable[[str, str], str]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Objective:
    """A target on a recorded signal, in the signal's unit (seconds or a ratio)."""

    name: str
    record: str
    target: float


E2E = "slo_operator:e2e_latency_seconds:quantile"
TTFT = "slo_operator:ttft_seconds:quantile"
ITL = "slo_operator:inter_token_latency_seconds:quantile"
JITTER = "slo_operator:jitter:ratio"
REQUEST_RATE = "slo_operator:requests:rate"


def recorded(spec: SLOPolicySpec) -> list[Signal]:
    """The signals a policy's rules record, at the policy's percentiles."""
    o = spec.objectives
    out = [
        Signal("e2e", E2E, _quantile(o.e2e_percentile, _names(promql.E2E_SOURCES)),
               {"quantile": f"{o.e2e_percentile:g}"}),
        Signal("ttft", TTFT, _quantile(o.ttft_percentile, _names(promql.TTFT_SOURCES)),
               {"quantile": f"{o.ttft_percentile:g}"}),
        Signal("decode_rate", DECODE_RATE, _decode_rate),
        Signal("decode_mean", DECODE_MEAN, _decode_mean),
        Signal("request_rate", REQUEST_RATE, _request_rate),
    ]
    if o.inter_token_latency_ms is not None:
        out.append(Signal("itl", ITL, _quantile(o.inter_token_percentile,
                                                _names(promql.ITL_SOURCES)),
                          {"quantile": f"{o.inter_token_percentile:g}"}))
    return out


def objectives(spec: SLOPolicySpec) -> list[Objective]:
    """The targets that make a window bad when missed."""
    o = spec.objectives
    out = [
        Objective("e2e", E2E, o.e2e_latency_ms / 1000),
        Objective("ttft", TTFT, o.ttft_ms / 1000),
    ]
    if o.throughput_cv_max is not None:
        out.append(Objective("jitter", JITTER, o.throughput_cv_max))
    if o.inter_token_latency_ms is not None:
        out.append(Objective("itl", ITL, o.inter_token_latency_ms / 1000))
    return out
