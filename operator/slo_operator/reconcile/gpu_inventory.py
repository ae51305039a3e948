"""The cluster's GPUs as one pass sees them: pools, prices and free GPUs, as values.

A pass derives a :class:`Fleet` once from its snapshot (``survey``) and threads it through
the services it reconciles: each per-service plan takes the fleet and returns it with the
GPUs it placed taken out (:class:`GpuLedger` is immutable; ``claim`` returns a new one),
so services reconciled from one snapshot do not all claim the same free GPUs, and nothing
is written into the snapshot itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from slo_operator.api.cluster import NodeInfo, Snapshot
from slo_operator.control.prices import DEFAULT_PRICES, PriceList, parse_prices
from slo_operator.reconcile.desired import Pool, as_int, discover_pools, pool_nodes
from slo_operator.render.names import label_value

NodeResource = tuple[str, str]  # (node name, GPU resource name)


@dataclass(frozen=True)
class GpuLedger:
    """Free GPUs per (node, GPU resource): allocatable minus what the operated services'
    scheduled pods on that node ask for, minus what this pass has placed so far. A count
    may go negative (pods of another scheduler's making); readers clamp it at zero."""

    free: Mapping[NodeResource, int] = field(default_factory=dict)

    @staticmethod
    def of(snap: Snapshot) -> GpuLedger:
        """The free counts the snapshot's nodes and pods leave."""
        free: dict[NodeResource, int] = {}
        for node in snap.nodes:
            if not node.schedulable:
                continue
            for res, qty in node.allocatable.items():
                n = as_int(qty)
                if n and "/" in res:
                    free[(node.name, res)] = n
        for pods in snap.pods.values():
            for p in pods:
                if p.node and p.gpu_resource and not p.unschedulable:
                    key = (p.node, p.gpu_resource)
                    free[key] = free.get(key, 0) - max(1, p.gpus)
        return GpuLedger(free)

    def room(self, pool: Pool, nodes: Sequence[NodeInfo], selector: Mapping[str, str],
             gpus: int) -> int:
        """Replicas of ``gpus`` GPUs each that fit on the pool's free GPUs now (a replica's
        GPUs are on one node), on the nodes ``selector`` allows."""
        hw = pool.resolution.hardware
        if hw is None:
            return 0
        return sum(max(0, self.free.get((n, hw.resource_name), 0)) // max(1, gpus)
                   for n in pool_nodes(pool, nodes, selector))

    def claim(self, pool: Pool, nodes: Sequence[NodeInfo], selector: Mapping[str, str],
              gpus: int, replicas: int) -> GpuLedger:
        """The ledger with ``replicas`` replicas' GPUs taken out, node by node."""
        hw = pool.resolution.hardware
        if hw is None or replicas <= 0:
            return self
        free = dict(self.free)
        for n in pool_nodes(pool, nodes, selector):
            key = (n, hw.resource_name)
            while replicas > 0 and free.get(key, 0) >= max(1, gpus):
                free[key] -= max(1, gpus)
                replicas -= 1
        return GpuLedger(free)

    def by_product(self, pools: Sequence[Pool]) -> dict[str, int]:
        """Free GPUs per pool, keyed by its GPU-product label value (the fleet step's view)."""
        out: dict[str, int] = {}
        for pool in pools:
            hw = pool.resolution.hardware
            if hw is None:
                continue
            key = label_value(pool.product)
            out[key] = out.get(key, 0) + sum(max(0, self.free.get((n, hw.resource_name), 0))
                                             for n in pool.nodes)
        return out


@dataclass(frozen=True)
class Fleet:
    """What every service of one pass plans against: the GPU pools (classified once), the
    price list, and the GPUs still free."""

    pools: tuple[Pool, ...] = ()
    prices: PriceList = DEFAULT_PRICES
    gpus: GpuLedger = field(default_factory=GpuLedger)

    def with_gpus(self, gpus: GpuLedger) -> Fleet:
        return replace(self, gpus=gpus)


def cluster_prices(snap: Snapshot) -> PriceList:
    """The cluster's price list: the labelled ConfigMaps' data over the defaults (more than
    one: later names win, and the conflict is reported)."""
    if not snap.prices:
        return DEFAULT_PRICES
    names = sorted(snap.prices)
    merged: dict[str, str] = {}
    for name in names:
        merged.update(snap.prices[name])
    prices = parse_prices(merged, ", ".join(f"ConfigMap {n}" for n in names))
    if len(names) > 1:
        prices = replace(prices, problems=(
            *prices.problems,
            f"{len(names)} ConfigMaps carry the price label: {', '.join(names)}; "
            "later names win"))
    return prices


def survey(snap: Snapshot) -> Fleet:
    """The snapshot's fleet: once per pass, not once per service."""
    return Fleet(tuple(discover_pools(snap.nodes)), cluster_prices(snap), GpuLedger.of(snap))
