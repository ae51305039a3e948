"""Placement across GPU pools: which variant of a service runs how many replicas.

Pure. A service that may run on several GPU pools has one *variant* per pool (its own
engine settings and Deployment, one Service in front of all). Given the replicas the
control law wants in total, placement decides each variant's share:

1. **Order.** Variants that meet the SLO come first, cheapest cost per unit of
   SLO-meeting throughput first: ``price per GPU-hour x GPUs per replica / requests per
   second one replica sustains within the SLO`` (``control.capacity``). When the user
   lists ``spec.hardware.gpuProducts``, their order wins and cost only breaks ties.
2. **Fill and spill.** Replicas fill the first variant up to the room its pool has (its
   scheduled replicas plus the free GPUs of the pool); the rest spill to the next variant
   that fits. A variant whose pods are Pending for lack of GPUs has no room beyond its
   scheduled replicas, whatever the free count says (the scheduler knows better). Replicas
   that fit nowhere stay with the first variant, where they wait as Pending.
3. **Scale-in order.** Because the cheapest variants fill first, fewer replicas leave the
   dearest variant first.
4. **Return, surge first.** When a better pool has room again, its variant grows at
   once, but a variant that is to shrink keeps replicas until the growing variants'
   replicas are Ready: Ready capacity never drops below ``min(total, Ready now)`` because
   of a move. Held replicas stay on the cheapest shrinking variant, the dearest go first.
5. **Wake from zero.** The first variant in the order wakes first.

Every move carries a reason that names pools, prices and free GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from slo_operator.control.capacity import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    itl_budget_ms,
    replica_capacity,
    seed_step_times,
)

# Tensor parallelism over t GPUs shortens a step by 1 + TP_EFFICIENCY * (t - 1): the
# all-reduce after every layer costs the rest (an assumption, docs/placement.md).
TP_EFFICIENCY = 0.85

@dataclass(frozen=True)
class VariantOption:
    """One pool a service may run on, with what placement needs to know of it."""

    variant: str  # stable id of the variant (names its Deployment)
    product: str  # GPU product (catalogue key)
    gpus_per_replica: int
    price_per_gpu_hour: float
    replica_rate: float  # requests/s one replica sustains within the SLO
    meets_slo: bool = True  # False: even the smallest batch misses a latency target
    free_gpus: int = 0  # GPUs of the pool held by no scheduled replica
    current: int = 0  # replicas the variant's Deployment asks for now
    scheduled: int = 0  # its pods bound to a node
    ready: int = 0  # its Ready pods
    pending: int = 0  # its pods Pending for lack of GPUs
    preference: int | None = None  # position in spec.hardware.gpuProducts, if listed

    @property
    def cost_per_rate(self) -> float:
        """Price of one request per second of SLO-meeting throughput (lower is better)."""
        if self.replica_rate <= 0:
            return math.inf
        return self.price_per_gpu_hour * max(1, self.gpus_per_replica) / self.replica_rate

    @property
    def room(self) -> int:
        """Replicas this variant can run now without a Pending pod."""
        if self.pending > 0:
            return self.scheduled
        return self.scheduled + max(0, self.free_gpus) // max(1, self.gpus_per_replica)


@dataclass(frozen=True)
class Placement:
    """Replicas per variant, in placement order, and why."""

    replicas: dict[str, int]
    order: tuple[str, ...]
    reasons: tuple[str, ...] = ()
    spilled: int = 0  # replicas placed beyond the first variant for lack of room
    held: int = 0  # replicas kept on shrinking variants until others are Ready
    waiting: int = 0  # replicas that fit nowhere (they wait Pending on the first variant)
    moves: tuple[str, ...] = field(default=(), compare=False)

    @property
    def total(self) -> int:
        """Replicas asked for across all variants (held ones included)."""
        return sum(self.replicas.values())


def slo_rate(
    *,
    model_size_b: float | None,
    precision: str,
    product: str,
    gpus_per_replica: int,
    e2e_ms: float,
    ttft_ms: float,
    itl_ms: float | None,
    min_batch: int,
    max_batch: int,
    prompt_tokens: float = DEFAULT_PROMPT_TOKENS,
    output_tokens: float = DEFAULT_OUTPUT_TOKENS,
) -> tuple[float, bool]:
    """(requests/s one replica sustains within the SLO, whether it can meet it at all),
    from the capacity model seeded for the product, precision and tensor parallelism."""
    st = seed_step_times(model_size_b, precision, product)
    st = st.scaled(1.0 + TP_EFFICIENCY * (max(1, gpus_per_replica) - 1))
    cap = replica_capacity(
        st, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        itl_budget=itl_budget_ms(e2e_ms, ttft_ms, itl_ms, output_tokens),
        min_batch=min_batch, max_batch=max_batch,
    )
    return cap.rate, cap.feasible


def rank(options: Sequence[VariantOption]) -> list[VariantOption]:
    """Placement order: the user's product list first, then SLO-meeting before not, then
    the lowest cost per unit of SLO-meeting throughput; ties by variant id."""
    def key(o: VariantOption) -> tuple[bool, int, bool, float, str]:
        return (o.preference is None, o.preference or 0, not o.meets_slo, o.cost_per_rate,
                o.variant)
    return sorted(options, key=key)


def describe_order(ranked: Sequence[VariantOption]) -> str:
    """One line naming each variant's cost per unit of SLO-meeting throughput."""
    parts = []
    for o in ranked:
        cost = "n/a" if math.isinf(o.cost_per_rate) else f"{o.cost_per_rate:.3g}"
        extra = "" if o.meets_slo else ", misses the SLO at any batch"
        listed = "" if o.preference is None else f", gpuProducts[{o.preference}]"
        parts.append(f"{o.product} ({cost} per req/s: {o.price_per_gpu_hour:.3g}/GPU-h x "
                     f"{o.gpus_per_replica} GPU / {o.replica_rate:.3g} req/s{extra}{listed})")
    return "; ".join(parts)


def place(total: int, options: Sequence[VariantOption]) -> Placement:
    """Split ``total`` replicas across the variants (see the module's rules)."""
    ranked = rank(options)
    if not ranked:
        return Placement({}, ())
    total = max(0, total)
    order = tuple(o.variant for o in ranked)
    target: dict[str, int] = {}
    reasons: list[str] = []
    left = total
    for o in ranked:
        take = min(left, o.room)
        target[o.variant] = take
        left -= take
    first = ranked[0]
    waiting = left
    if waiting:
        target[first.variant] += waiting
        reasons.append(f"{waiting} replica(s) fit no pool now: they wait on {first.product}, "
                       "the first in order")
    spilled = sum(target[o.variant] for o in ranked[1:])
    if spilled and total:
        last = max(i for i, o in enumerate(ranked) if target[o.variant])
        full = [o for o in ranked[:last] if target[o.variant] >= o.room]
        why = ", ".join(f"{o.product} full ({max(0, o.free_gpus)} free GPUs"
                        + (f", {o.pending} Pending" if o.pending else "") + ")"
                        for o in full[:3])
        reasons.append(f"{spilled} replica(s) spilled past {first.product}: {why}")

    # Surge first: shrinking variants keep replicas until the growing ones are Ready.
    ready_now = sum(o.ready for o in ranked)
    floor = min(total, ready_now)
    ready_after = sum(min(target[o.variant], o.ready) for o in ranked)
    deficit = max(0, floor - ready_after)
    held = 0
    moves = []
    for o in ranked:  # cheapest first: the dearest shrinking variants go first
        drop = o.current - target[o.variant]
        keep = min(max(0, drop), deficit)
        target[o.variant] += keep
        deficit -= keep
        held += keep
        if drop - keep > 0:
            moves.append(f"-{drop - keep} {o.product}")
        elif drop < 0 and o.current:
            moves.append(f"+{-drop} {o.product}")
    if held:
        reasons.append(f"{held} replica(s) kept on the pools they leave until the replicas "
                       "replacing them are Ready (surge first)")
    if total and not any(o.current for o in ranked):
        reasons.append(f"{first.product} wakes first: {describe_order(ranked[:2])}")
    return Placement(target, order, tuple(reasons), spilled=spilled, held=held,
                     waiting=waiting, moves=tuple(moves))
