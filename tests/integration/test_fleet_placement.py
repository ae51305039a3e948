"""A hundred copies of the 8B example without gpuProducts on the standard fake fleet
(2 x 8 H100, 2 x 8 A100, 1 x 8 L4, 1 x 8 MI300X: 48 GPUs), with the real operator.

Every service that fits the fleet runs, the pools that serve the FP8 model cheapest under
the default prices (MI300X and H100) fill first, and once placement settles no pod is
Pending while a pool has free GPUs (docs/placement.md).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from slo_runtime.contract import LABEL_GPU, LABEL_MANAGED_BY, MANAGED_BY
from tests.integration.operator_support import (
    ROOT,
    OperatorProcess,
    chart_operator,
)

pytestmark = pytest.mark.integration

SERVICES = int(os.environ.get("SLO_FLEET_SERVICES", "100"))


@pytest.fixture(scope="module")
def fleet_operator(cluster: LocalCluster,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with chart_operator(cluster, tmp_path_factory.mktemp("fleet"), interval=2.0,
                        log_tail=3000) as op:
        yield op


def _example() -> tuple[dict[str, Any], dict[str, Any]]:
    policy, svc = yaml.safe_load_all((ROOT / "examples" / "llama-8b-h100.yaml").read_text())
    policy["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 1}
    policy["spec"].pop("gpuBudget", None)
    del svc["spec"]["hardware"]  # no gpuProducts: placement chooses the pool
    return policy, svc


def _pool_usage(cluster: LocalCluster) -> tuple[dict[str, int], dict[str, int], int]:
    """(GPUs allocatable per product, GPUs used by Running pods per product, Pending pods)."""
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    pods = cluster.kubectl_json("get", "pods", "-A", "-l",
                                f"{LABEL_MANAGED_BY}={MANAGED_BY}")["items"]
    product_of = {}
    capacity: dict[str, int] = collections.Counter()
    for n in nodes:
        if n["spec"].get("unschedulable"):
            continue
        alloc = n["status"].get("allocatable") or {}
        for res in ("nvidia.com/gpu", "amd.com/gpu"):
            if int(alloc.get(res, "0")):
                labels = n["metadata"]["labels"]
                product = labels.get("nvidia.com/gpu.product") or labels.get(
                    "amd.com/gpu.product-name", "?")
                product_of[n["metadata"]["name"]] = product
                capacity[product] += int(alloc[res])
    used: dict[str, int] = collections.Counter()
    pending = 0
    for p in pods:
        if p["metadata"].get("deletionTimestamp"):
            continue
        node = p["spec"].get("nodeName")
        if p["status"].get("phase") == "Running" and node in product_of:
            used[product_of[node]] += 1
        elif not node:
            pending += 1
    return dict(capacity), dict(used), pending


def test_a_hundred_services_fill_the_fleet_cheapest_pools_first(
    cluster: LocalCluster, fleet_operator: OperatorProcess, namespace: str
) -> None:
    policy, svc = _example()
    docs = [{**policy, "metadata": {"name": "chat-gold", "namespace": namespace}}]
    for i in range(SERVICES):
        docs.append({**svc, "metadata": {"name": f"llama-8b-{i:03d}", "namespace": namespace}})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    capacity, _, _ = _pool_usage(cluster)
    total = sum(capacity.values())
    fits = min(SERVICES, total)

    def settled() -> tuple[dict[str, int], dict[str, int], int] | None:
        cap, used, pending = _pool_usage(cluster)
        running = sum(used.values())
        free = {p: cap[p] - used.get(p, 0) for p in cap}
        if running == fits and (pending == 0 or not any(free.values())):
            return cap, used, pending
        return None

    cap, used, pending = cluster.wait_for(settled, timeout=420,
                                          desc=f"{fits} of {SERVICES} services running")
    print("\npool usage:", {p: f"{used.get(p, 0)}/{cap[p]}" for p in sorted(cap)},
          f"pending {pending}")
    # The pools that serve an FP8 8B model cheapest per request/s fill first.
    for product in cap:
        if "H100" in product or "MI300X" in product:
            assert used.get(product, 0) == cap[product], (product, used, cap)
    # Each running service reports its placement; its order starts with MI300X or H100.
    items = cluster.kubectl_json("get", "infsvc", "-n", namespace)["items"]
    orders = {tuple(v["product"] for v in (i.get("status") or {}).get("variants") or [])
              for i in items}
    assert orders and all(o and ("MI300X" in o[0] or "H100" in o[0]) for o in orders), orders
    # The services still waiting keep trying other full pools, so a pod list can catch one
    # of their Pending pods being replaced: await the count rather than read it once.
    def running_pods() -> list[dict] | None:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                    f"{GROUP}/service")["items"]
        up = [p for p in pods if p["status"].get("phase") == "Running"
              and not p["metadata"].get("deletionTimestamp")]
        return up if len(up) == fits else None

    running = cluster.wait_for(running_pods, timeout=60, desc=f"{fits} pods Running")
    assert all(p["metadata"]["labels"].get(LABEL_GPU) for p in running)
