"""Fleet step: who gets scarce GPUs when services want more than exists.

Pure. Input: each service's wanted replicas (from ``decide``), the replicas it holds
(scheduled pods, which already own their GPUs), GPUs per replica, its policy priority and
tenant, each tenant's ``gpuBudget`` and the free GPUs per pool (a GPU product). Rules:

1. A tenant's services together never exceed its budget: its services are served in
   priority order and each gets what is left of the budget (held replicas included, so a
   lowered budget scales the lowest-priority services in).
2. Free GPUs of a pool (plus those released by scale-ins this pass) go to scale-outs in
   priority order, higher first; ties by namespace/name so the result is deterministic.
3. A higher-priority service still short after that reclaims GPUs from lower-priority
   services of the same pool (lowest priority first, never below their minimum): a
   higher-priority service's SLO is never traded for a lower one's.
4. Every service granted less than it wanted gets a reason and a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slo_operator.api.observe import ServiceKey
from slo_operator.control import reasons as R


@dataclass(frozen=True)
class GpuRequest:
    """One service's wish for the fleet step."""

    key: ServiceKey
    wanted: int  # replicas decide() wants
    held: int  # replicas scheduled now (they own their GPUs)
    gpus_per_replica: int = 1
    priority: int = 0
    tenant: str = ""
    pool: str = ""  # GPU product the replicas run on
    min_replicas: int = 0


@dataclass(frozen=True)
class Grant:
    """What a service may run; ``reason`` is None when it got what it wanted."""

    key: ServiceKey
    replicas: int
    reason: str | None = None
    message: str = ""


def arbitrate(
    requests: Sequence[GpuRequest],
    free_gpus: Mapping[str, int],
    budgets: Mapping[str, int | None],
) -> dict[ServiceKey, Grant]:
    """Grant replicas by priority within tenant budgets and free GPUs per pool."""
    order = sorted(requests, key=lambda r: (-r.priority, r.key.namespace, r.key.name))
    gpr = {r.key: max(1, r.gpus_per_replica) for r in order}
    why: dict[ServiceKey, tuple[str, str]] = {}

    # 1. Tenant budgets.
    left = {t: b for t, b in budgets.items() if b is not None}
    capped: dict[ServiceKey, int] = {}
    for r in order:
        want = max(0, r.wanted)
        if r.tenant in left:
            allowed = max(0, left[r.tenant]) // gpr[r.key]
            if want > allowed:
                why[r.key] = (R.GPU_BUDGET, f"tenant {r.tenant!r} gpuBudget "
                              f"{budgets[r.tenant]} GPUs leaves room for {allowed} replica(s) "
                              f"of {gpr[r.key]} GPU(s) after higher-priority services")
                want = allowed
            left[r.tenant] -= want * gpr[r.key]
        capped[r.key] = want

    # 2. Free GPUs per pool, plus what scale-ins release.
    free = {p: max(0, n) for p, n in free_gpus.items()}
    for r in order:
        released = max(0, r.held - capped[r.key]) * gpr[r.key]
        free[r.pool] = free.get(r.pool, 0) + released
    # Every request's pool is in ``free`` from here on.
    granted: dict[ServiceKey, int] = {}
    for r in order:
        target = capped[r.key]
        held = max(0, r.held)
        if target <= held:
            granted[r.key] = target
            continue
        extra = min(target - held, free[r.pool] // gpr[r.key])
        free[r.pool] -= extra * gpr[r.key]
        granted[r.key] = held + extra

    # 3. Reclaim from lower priorities for services still short.
    for r in order:
        short = capped[r.key] - granted[r.key]
        if short <= 0:
            continue
        need = short * gpr[r.key] - free[r.pool]
        victims = [v for v in reversed(order)
                   if v.pool == r.pool and v.priority < r.priority]
        for v in victims:
            if need <= 0:
                break
            spare = granted[v.key] - max(0, v.min_replicas)
            if spare <= 0:
                continue
            take = min(spare, -(-need // gpr[v.key]))
            granted[v.key] -= take
            free[r.pool] += take * gpr[v.key]
            need -= take * gpr[v.key]
            why[v.key] = (R.GPUS_RECLAIMED, f"{take} replica(s) given up to higher-priority "
                          f"{r.key} (priority {r.priority} > {v.priority}) in pool {r.pool!r}")
        extra = min(short, free[r.pool] // gpr[r.key])
        free[r.pool] -= extra * gpr[r.key]
        granted[r.key] += extra

    # 4. Reasons for everyone short of their wish.
    out: dict[ServiceKey, Grant] = {}
    for r in order:
        n = granted[r.key]
        if n >= r.wanted:
            out[r.key] = Grant(r.key, n)
            continue
        if r.key in why:
            reason, message = why[r.key]
        else:
            reason = R.NO_GPUS
            message = (f"pool {r.pool!r} has no free GPUs for {r.wanted - n} more replica(s) "
                       f"of {gpr[r.key]} GPU(s); higher-priority services were served first")
        out[r.key] = Grant(r.key, n, reason, f"wanted {r.wanted}, granted {n}: {message}")
    return out
