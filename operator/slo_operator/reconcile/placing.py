"""Place one service's replicas on its variants (one Deployment per GPU pool); pure.

The reconciler gives the total replicas; ``control.placement.place`` splits them using
what the watch caches say: free GPUs per pool (the pass's :class:`GpuLedger`), each
variant's scheduled, Ready and Pending pods. The GPUs placed are taken out of the ledger
that ``place_variants`` returns, so that the next service the caller plans with it does
not claim them too. Retiring a variant is planned as :class:`Delete` actions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import replace

from slo_operator.api import conditions as C
from slo_operator.api.cluster import DeploymentObs, PodObs, Snapshot
from slo_operator.api.models import VariantStatus
from slo_operator.control.placement import Placement, VariantOption, place
from slo_operator.reconcile.actions import Delete
from slo_operator.reconcile.desired import ServicePlan, engine_precision
from slo_operator.reconcile.gpu_inventory import GpuLedger
from slo_operator.reconcile.status import EventSpec
from slo_operator.render.objects import RenderInput, variant_name

# Replicas pending for a non-GPU cause are not a full pool: only these messages close one.
_GPU_WORDS = ("Insufficient", "gpu", "mig-", "gaudi")


def _gpu_pending(p: PodObs) -> bool:
    return p.unschedulable and any(w in p.message for w in _GPU_WORDS)


def lost(p: PodObs, nodes: Set[str]) -> bool:
    """Bound to a node that is gone (``nodes``: the names of the nodes that exist).

    Nothing evicts such a pod at once: its status keeps saying Running and Ready until the
    kube-controller-manager's pod garbage collector force-deletes it, 40 s or more after
    the node went (kubernetes pkg/controller/podgc/gc_controller.go, ``gcOrphaned`` with
    ``quarantineTime``), and only then does its ReplicaSet replace it. Until then it serves
    nothing and holds no GPU of any pool, so placement counts it neither as scheduled nor
    as Ready."""
    return bool(p.node) and p.node not in nodes


def options(plan: ServicePlan, snap: Snapshot, namespace: str, name: str,
            selector: Mapping[str, str], gpus: GpuLedger) -> list[VariantOption]:
    """Each variant's placement facts from the watch caches and the GPUs still free
    (``selector``: the service's own node selector, which narrows each pool). Pods of a
    lost node (see :func:`lost`) count as neither scheduled nor Ready: a pool that lost a
    node has only its remaining nodes' room, and the replicas beyond it spill at once."""
    deps = snap.variants(namespace, name)
    nodes = {n.name for n in snap.nodes}
    pods = [p for p in snap.pods_of(namespace, name) if not lost(p, nodes)]
    out = []
    for v in plan.variants:
        vid = v.option.variant
        mine = [p for p in pods if p.variant == vid]
        dep = deps.get(vid)
        out.append(replace(
            v.option,
            free_gpus=gpus.room(v.pool, snap.nodes, selector, v.option.gpus_per_replica)
            * v.option.gpus_per_replica,
            current=(dep.spec_replicas or 0) if dep else 0,
            scheduled=sum(1 for p in mine if not p.unschedulable),
            ready=sum(1 for p in mine if p.ready),
            pending=sum(1 for p in mine if _gpu_pending(p)),
        ))
    return out


def place_variants(
    plan: ServicePlan, snap: Snapshot, namespace: str, name: str, replicas: int,
    gpus: GpuLedger,
) -> tuple[Placement, list[RenderInput], list[VariantOption], GpuLedger]:
    """The placement, the render input of every variant to apply (those with replicas and
    those whose Deployment exists, which may have to shrink to zero), the variants'
    placement facts it was made from, and the ledger with the new replicas' GPUs taken."""
    selector = plan.render.node_selector
    opts = options(plan, snap, namespace, name, selector, gpus)
    placed = place(replicas, opts)
    existing = snap.variants(namespace, name)
    renders = []
    for v, o in zip(plan.variants, opts, strict=True):
        n = placed.replicas.get(o.variant, 0)
        if n or o.variant in existing:
            renders.append(replace(v.render, replicas=n))
        if not o.pending:
            gpus = gpus.claim(v.pool, snap.nodes, selector, o.gpus_per_replica,
                              n - o.scheduled)
    return placed, renders, opts, gpus


def retire_variants(snap: Snapshot, namespace: str, name: str, plan: ServicePlan,
                    placed: Placement) -> list[Delete]:
    """Deletes of the Deployments of variants no pool offers any more (a pool removed, or a
    Deployment of a release without variants), once the variants that stay have as many
    Ready replicas as the service asks for: capacity never drops for the clean-up. Ready
    pods of a lost node (see :func:`lost`) do not count."""
    keep = {v.option.variant for v in plan.variants}
    deps = snap.variants(namespace, name)
    stale = {vid: d for vid, d in deps.items() if vid not in keep}
    if not stale:
        return []
    nodes = {n.name for n in snap.nodes}
    serving = [p for p in snap.pods_of(namespace, name) if p.ready and not lost(p, nodes)]
    ready = sum(min(deps[v].ready_replicas, sum(1 for p in serving if p.variant == v))
                for v in keep if v in deps)
    wanted = sum(placed.replicas.values())
    if wanted and ready < wanted:
        return []
    # A refused delete is retried next pass; the variant keeps serving meanwhile.
    return [Delete("Deployment", namespace, dep.name or variant_name(name, vid))
            for vid, dep in sorted(stale.items())]


def variant_status(plan: ServicePlan, placed: Placement, opts: Sequence[VariantOption],
                   deps: Mapping[str, DeploymentObs]) -> list[VariantStatus]:
    """``status.variants``: every pool the service may run on, in placement order, from
    the facts ``place_variants`` used. A variant's Ready count is its Deployment's, but no
    more than its Ready pods on nodes that exist: a Deployment keeps counting the pods of
    a lost node (see :func:`lost`) until they are garbage-collected."""
    out = []
    for rank, (v, o) in enumerate(zip(plan.variants, opts, strict=True)):
        dep = deps.get(o.variant)
        cost = o.cost_per_rate
        out.append(VariantStatus(
            name=o.variant, product=o.product,
            deployment=variant_name(v.render.name, o.variant),
            desired_replicas=placed.replicas.get(o.variant, 0),
            ready_replicas=min(dep.ready_replicas, o.ready) if dep else 0,
            pending_replicas=o.pending,
            gpus_per_replica=o.gpus_per_replica, precision=engine_precision(v.engine),
            cost_per_request_per_second=None if cost == float("inf") else round(cost, 4),
            rank=rank,
        ))
    return out


def retired_event(retired: Sequence[Delete], placed: Placement) -> list[EventSpec]:
    """One Normal Event naming the Deployments retired because no GPU pool offers their
    variant any more (a pool's last node lost, say) and where the replicas run now."""
    if not retired:
        return []
    running = ", ".join(f"{n} on {vid}" for vid, n in placed.replicas.items() if n) or "none"
    names = ", ".join(d.name for d in retired)
    return [EventSpec("Normal", C.PLACED, f"Retired {names}: no GPU pool offers its variant "
                      f"any more; replicas now: {running}")]


def placement_event(placed: Placement, old: str | None) -> list[EventSpec]:
    """One Event when the placement's explanation changes to a spill, a hold or replicas
    that fit nowhere (Warning for the last)."""
    text = "; ".join(placed.reasons)
    if not text or text == old or not (placed.spilled or placed.held or placed.waiting):
        return []
    return [EventSpec("Warning" if placed.waiting else "Normal", C.PLACED, text)]
