"""The SLO signals the generated rules record, one expression per signal for all services.

Each expression groups by ``(namespace, service)`` so one rule covers every service a
policy binds. The gateway's histograms (``slo_gateway_*``, admission queue included) are
preferred; vLLM's own histograms are the fallback where the gateway is not in the path
(``A or B`` keeps B's series only for services A has none for).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slo_operator.api.models import SLOPolicySpec
from slo_operator.slo import promql

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


def _jitter(sel: str, window: str) -> str:
    # Service instability, not demand: coefficient of variation of the per-service decode
    # rate (generated tokens per running request and second), sampled every 10s in the window.
    rate = (f"(sum by ({BY}) (rate(vllm:generation_tokens_total{{{sel}}}[30s]))"
            f" / sum by ({BY}) (vllm:num_requests_running{{{sel}}} > 0))")
    return (f"stddev_over_time({rate}[{window}:10s])\n/\n"
            f"avg_over_time({rate}[{window}:10s])")


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
        Signal("jitter", JITTER, _jitter),
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
        Objective("e2e", E2E, o.e2e_latency_p99_ms / 1000),
        Objective("ttft", TTFT, o.ttft_p95_ms / 1000),
        Objective("jitter", JITTER, o.throughput_cv_max),
    ]
    if o.inter_token_latency_ms is not None:
        out.append(Objective("itl", ITL, o.inter_token_latency_ms / 1000))
    return out
