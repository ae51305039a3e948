"""``ControlState``: what the law remembers between cycles, kept in the service's status.

State that must survive an operator restart lives in status (never in memory), so the
state is a small JSON-able dict. ``from_dict`` never raises: a hand-edited or older
status yields the fields it can read and defaults for the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slo_operator.api.numbers import finite_number

# Bounded history sizes keep status small whatever the cycle period.
MAX_RECOMMENDATIONS = 128  # runs of equal wishes, not cycles (see law)
MAX_RATES = 48
MAX_LIMITS = 10
STATE_VERSION = 1


@dataclass(frozen=True)
class ControlState:
    """Memory of the control law (times are seconds since the epoch)."""

    last_good_replicas: int | None = None  # last valid decision, held on metric outages
    last_good_limit: int | None = None
    last_good_time: float | None = None
    recommendations: tuple[tuple[float, int], ...] = ()  # (last time, replicas) per run
    history_since: float | None = None  # when the recommendation history began
    last_scale_time: float | None = None
    last_scale_direction: int = 0  # +1 up, -1 down, 0 never scaled
    speed: float = 1.0  # learnt speed of a replica relative to the seed step times
    speed_key: str = ""  # hardware/precision the speed was learnt on
    speed_samples: int = 0
    model_error: float | None = None  # measured / predicted time per output token, last seen
    prefill_error: float | None = None  # measured / predicted mean prefill time, last seen
    correction: float = 1.0  # feedback multiplier on the replica need from the SLO error
    limit_bias: float = 1.0  # multiplier on the model's batch limit from the SLO error
    limits: tuple[tuple[float, int], ...] = ()  # (time, limit) of the last limit changes
    rates: tuple[tuple[float, float], ...] = ()  # (time, request rate) for burst statistics
    # (time, prompt work arriving in replicas' worth: the arrival rate times the mean
    # uncached prompt's prefill time, law.work_load) for that work's trend.
    loads: tuple[tuple[float, float], ...] = ()
    prompt_tokens: float | None = None  # last seen mean prompt length
    output_tokens: float | None = None  # last seen mean output length
    # Last seen answers' tail: tokens the answers at the end-to-end percentile are not below.
    answer_tail: float | None = None
    cached_share: float | None = None  # last seen share of prompt tokens in the prefix cache
    last_waiting: float | None = None  # queue length at the last valid decision
    last_time: float | None = None  # time of the last valid decision
    # Last valid decision that found capacity short (replicas asked for still starting or
    # Pending, or Ready ones warming up) while first tokens queued over their objective:
    # latency misses within their reach of it are that queue's, not the model's
    # (law.shortfall_reach).
    short_time: float | None = None
    # Measured inter-token percentile over the objective at the last valid decision (None:
    # no objective or no samples): above 1 the ITL lever may move before its rate limit.
    itl_over: float | None = None
    # Measured jitter over throughputCVMax at the last valid decision (None: no bound, or
    # too few requests in the window to read a spread): above 1 the chunked-prefill budget
    # may come down (reconcile.chunking, the jitter lever).
    jitter_over: float | None = None
    # Scale to zero: since when the service has been idle (no request over the window),
    # since when it is at zero, and the wake (its requestedAt) last acted on or already
    # there when it went to zero.
    idle_since: float | None = None
    zero_since: float | None = None
    wake_seen: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # reserved, round-tripped as is

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for status (camelCase keys, no nulls)."""
        out: dict[str, Any] = {
            "v": STATE_VERSION,
            "lastGood": None if self.last_good_replicas is None else {
                "replicas": self.last_good_replicas,
                "limit": self.last_good_limit,
                "time": self.last_good_time,
            },
            "recommendations": [[_r(t), n] for t, n in self.recommendations],
            "historySince": _opt(self.history_since),
            "lastScale": None if self.last_scale_time is None else {
                "time": _r(self.last_scale_time), "direction": self.last_scale_direction,
            },
            "speed": round(self.speed, 4),
            "speedKey": self.speed_key,
            "speedSamples": self.speed_samples,
            "modelError": None if self.model_error is None else round(self.model_error, 3),
            "prefillError": None if self.prefill_error is None
            else round(self.prefill_error, 3),
            "correction": round(self.correction, 4),
            "limitBias": round(self.limit_bias, 4),
            "limits": [[_r(t), n] for t, n in self.limits],
            "rates": [[_r(t), round(r, 4)] for t, r in self.rates],
            "loads": [[_r(t), round(r, 4)] for t, r in self.loads],
            "promptTokens": _opt(self.prompt_tokens),
            "outputTokens": _opt(self.output_tokens),
            "answerTailTokens": _opt(self.answer_tail),
            "cachedShare": None if self.cached_share is None else round(self.cached_share, 4),
            "lastWaiting": _opt(self.last_waiting),
            "lastTime": _opt(self.last_time),
            "shortTime": _opt(self.short_time),
            "itlOver": _opt(self.itl_over),
            "jitterOver": _opt(self.jitter_over),
            "idleSince": _opt(self.idle_since),
            "zeroSince": _opt(self.zero_since),
            "wakeSeen": _opt(self.wake_seen),
        }
        if self.extra:
            out["extra"] = dict(self.extra)
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, data: Any) -> ControlState:
        """Read a state dict back; anything unreadable falls back to its default."""
        if not isinstance(data, Mapping):
            return cls()
        good = _map(data.get("lastGood"))
        scale = _map(data.get("lastScale"))
        extra = data.get("extra")
        return cls(
            last_good_replicas=_int(good.get("replicas"), lo=0),
            last_good_limit=_int(good.get("limit"), lo=0),
            last_good_time=_num(good.get("time")),
            recommendations=_pairs(data.get("recommendations"), int)[-MAX_RECOMMENDATIONS:],
            history_since=_num(data.get("historySince")),
            last_scale_time=_num(scale.get("time")),
            last_scale_direction=max(-1, min(1, _int(scale.get("direction")) or 0)),
            speed=_num(data.get("speed"), lo=0.05, hi=20.0) or 1.0,
            speed_key=str(data.get("speedKey") or ""),
            speed_samples=max(0, _int(data.get("speedSamples")) or 0),
            model_error=_num(data.get("modelError"), lo=0.0),
            prefill_error=_num(data.get("prefillError"), lo=0.0),
            correction=_num(data.get("correction"), lo=0.1, hi=10.0) or 1.0,
            limit_bias=_num(data.get("limitBias"), lo=0.001, hi=1000.0) or 1.0,
            limits=_pairs(data.get("limits"), int)[-MAX_LIMITS:],
            rates=_pairs(data.get("rates"), float)[-MAX_RATES:],
            loads=_pairs(data.get("loads"), float)[-MAX_RATES:],
            prompt_tokens=_num(data.get("promptTokens"), lo=0.0),
            output_tokens=_num(data.get("outputTokens"), lo=0.0),
            answer_tail=_num(data.get("answerTailTokens"), lo=0.0),
            cached_share=_num(data.get("cachedShare"), lo=0.0, hi=1.0),
            last_waiting=_num(data.get("lastWaiting"), lo=0.0),
            last_time=_num(data.get("lastTime")),
            short_time=_num(data.get("shortTime")),
            itl_over=_num(data.get("itlOver"), lo=0.0),
            jitter_over=_num(data.get("jitterOver"), lo=0.0),
            idle_since=_num(data.get("idleSince")),
            zero_since=_num(data.get("zeroSince")),
            wake_seen=_num(data.get("wakeSeen")),
            extra=dict(extra) if isinstance(extra, Mapping) else {},
        )

    def evolve(self, **changes: Any) -> ControlState:
        """A copy with some fields replaced."""
        return replace(self, **changes)


def _map(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _r(t: float) -> float:
    return round(t, 3)


def _opt(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 3)


def _num(x: Any, lo: float | None = None, hi: float | None = None) -> float | None:
    v = finite_number(x)
    if v is None:
        return None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        return None
    return v


def _int(x: Any, lo: int | None = None) -> int | None:
    v = _num(x)
    if v is None or v != int(v):
        return None
    if lo is not None and v < lo:
        return None
    return int(v)


def _pairs(x: Any, kind: type) -> tuple[Any, ...]:
    if not isinstance(x, list):
        return ()
    out = []
    for item in x:
        if isinstance(item, list) and len(item) == 2:
            t, v = _num(item[0]), (_int(item[1]) if kind is int else _num(item[1]))
            if t is not None and v is not None:
                out.append((t, v))
    return tuple(out)
