"""The mixed-fleet scenario: pools, placement per policy, cost, the report table."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from slo_devtools.sim import fleet as F
from slo_devtools.sim import traces as T
from slo_devtools.sim.bench import TARGETS, candidates, step_model
from slo_devtools.sim.discrete_event import Phase, Service, Simulation
from slo_devtools.sim.policies import Action, Context
from slo_devtools.sim.run import Tenant, Workload, simulate
from slo_devtools.sim.traces import Request
from slo_operator.control.prices import DEFAULT_PRICES

STRICT = TARGETS["strict"]["chat"]
MI300X, H100, A100, L4 = "mi300x-192gb", "h100-sxm-80gb", "a100-sxm4-80gb", "l4-24gb"


def _service() -> Service:
    sim = Simulation()
    svc = Service(sim, "s", step_model(), replicas=0)
    sim.services = {"s": svc}
    return svc


def _on(svc: Service) -> dict[str, int]:
    """Active (starting or ready) replicas per pool."""
    out: dict[str, int] = {}
    for r in svc.active():
        out[r.pool] = out.get(r.pool, 0) + 1
    return out


def _held(svc: Service) -> dict[str, int]:
    """Replicas holding GPUs (starting, ready, draining) per pool."""
    out: dict[str, int] = {}
    for r in svc.replicas:
        out[r.pool] = out.get(r.pool, 0) + 1
    return out


def _tiny(rate: float = 6.0) -> Workload:
    tr = T.ramp(rate_scale=rate, phases=((120.0, 2.0, 10.0), (120.0, 10.0, 2.0)), seed=1)
    return Workload("tiny", tr, (Tenant("ramp", step_model(), STRICT, max_replicas=40,
                                        initial_replicas=3),))


# --- pools and step models -------------------------------------------------------------
def test_default_fleet_is_the_local_fake_fleet() -> None:
    assert [(p.product, p.gpus, p.precision) for p in F.DEFAULT_FLEET] == [
        ("H100-SXM-80GB", 16, "fp8"), ("A100-SXM4-80GB", 16, "bf16"),
        ("L4-24GB", 8, "fp8"), ("MI300X-192GB", 8, "fp8")]


def test_pool_models_follow_bandwidth_and_memory() -> None:
    m = {p.variant: F.pool_model(p) for p in F.DEFAULT_FLEET}
    h200 = step_model("fp8")
    # Decode is memory-bound: MI300X (5.3 TB/s) beats the H200 (4.8), the L4 (0.3) is slowest.
    assert m[MI300X].decode_ms(32) < h200.decode_ms(32) < m[H100].decode_ms(32) \
        < m[L4].decode_ms(32)
    assert m[A100].precision == "bf16" and m[H100].precision == "fp8"
    # KV capacity from each GPU's memory: 192 GB holds more than 80 GB, 24 GB least.
    assert m[MI300X].kv_capacity_tokens > m[H100].kv_capacity_tokens \
        > m[L4].kv_capacity_tokens > 0


def test_replicas_run_with_their_pools_step_model() -> None:
    svc = _service()
    pl = F.CostPlacer(F.DEFAULT_FLEET, STRICT)
    pl.apply(svc, 10, 0.0, warm=True)
    for r in svc.replicas:
        assert r.model is pl.models[r.pool]
        assert r.model.gpu == pl.pools[r.pool].product


# --- placement ---------------------------------------------------------------------------
def test_slo_operator_orders_mi300x_and_h100_before_a100_and_l4() -> None:
    pl = F.CostPlacer(F.DEFAULT_FLEET, STRICT)
    assert pl.order[:2] == (MI300X, H100)
    assert set(pl.order[2:]) == {A100, L4}
    assert pl.hardware == "MI300X-192GB" and pl.precision == "fp8"


def test_slo_operator_fills_mi300x_then_h100_then_a100() -> None:
    svc = _service()
    pl = F.CostPlacer(F.DEFAULT_FLEET, STRICT)
    pl.apply(svc, 20, 0.0, warm=True)
    assert _on(svc) == {MI300X: 8, H100: 12}
    pl.apply(svc, 30, 1.0)
    assert _on(svc) == {MI300X: 8, H100: 16, A100: 6}
    assert svc.desired == 30


def test_peers_fixed_order_differs_from_slo_operators() -> None:
    listed = F.OrderPlacer(F.DEFAULT_FLEET, F.listed_order(F.DEFAULT_FLEET))
    cost = F.CostPlacer(F.DEFAULT_FLEET, STRICT)
    assert listed.order == (H100, A100, L4, MI300X) != cost.order
    svc = _service()
    listed.apply(svc, 20, 0.0, warm=True)
    assert _on(svc) == {H100: 16, A100: 4}


def test_wva_order_is_price_per_replica() -> None:
    assert F.price_order(F.DEFAULT_FLEET) == [L4, A100, MI300X, H100]
    pl = F.OrderPlacer(F.DEFAULT_FLEET, F.price_order(F.DEFAULT_FLEET))
    svc = _service()
    pl.apply(svc, 10, 0.0, warm=True)
    assert _on(svc) == {L4: 8, A100: 2}


def test_runs_give_wva_its_price_order_and_other_peers_the_listed_order() -> None:
    t = _tiny().tenants[0]
    orders = {}
    for label, make, make_placer in F.runs():
        name = make(t).name if label == "peer" else label
        orders[name] = make_placer(t).order
    assert orders["llm-d-wva"] == tuple(F.price_order(F.DEFAULT_FLEET))
    assert orders["slo-operator"][:2] == (MI300X, H100)
    assert orders["slo-operator, listed order"] == (H100, A100, L4, MI300X)
    assert orders["keda-outstanding>16"] == (H100, A100, L4, MI300X)
    # One run per policy family, plus the operator with the peers' order.
    assert len(orders) == len({f for f, _ in candidates()}) + 1


def test_peer_scale_in_removes_the_last_added_pool_first() -> None:
    svc = _service()
    pl = F.OrderPlacer(F.DEFAULT_FLEET, F.listed_order(F.DEFAULT_FLEET))
    pl.apply(svc, 20, 0.0, warm=True)
    pl.apply(svc, 17, 1.0)
    assert _on(svc) == {H100: 16, A100: 1}
    pl.apply(svc, 10, 2.0)
    assert _on(svc) == {H100: 10}


def test_slo_operator_scale_in_leaves_the_dearest_pool_first() -> None:
    svc = _service()
    pl = F.CostPlacer(F.DEFAULT_FLEET, STRICT)
    pl.apply(svc, 26, 0.0, warm=True)
    assert _on(svc) == {MI300X: 8, H100: 16, A100: 2}
    pl.apply(svc, 10, 1.0)
    assert _on(svc) == {MI300X: 8, H100: 2}


def test_pool_limits_hold_while_replicas_drain() -> None:
    """Draining replicas keep their GPUs: what fits nowhere waits and starts later."""
    svc = _service()
    pools = (F.Pool("H100-SXM-80GB", 3, "fp8"), F.Pool("MI300X-192GB", 2, "fp8"))
    pl = F.CostPlacer(pools, STRICT)
    pl.apply(svc, 5, 0.0, warm=True)
    assert _on(svc) == {MI300X: 2, H100: 3}
    for _ in svc.ready():
        svc.arrive(Request(0.0, 500, 400, "s"), 0.0)
    assert all(r.outstanding for r in svc.ready())
    pl.apply(svc, 2, 1.0)  # three drain, holding their GPUs
    assert sum(1 for r in svc.replicas if r.phase is Phase.DRAINING) == 3
    pl.apply(svc, 5, 2.0)  # no GPU is free: nothing starts, three wait
    held = _held(svc)
    assert held[MI300X] <= 2 and held[H100] <= 3
    assert svc.desired == 5 and sum(pl.pending.values()) == 3
    svc.sim.run([], lambda r: svc, 120.0)  # the drained replicas finish and leave
    pl.apply(svc, 5, 120.0)
    assert _on(svc) == {MI300X: 2, H100: 3} and sum(pl.pending.values()) == 0


@dataclass
class Checked:
    """A placer that asserts every pool's GPU limit after each placement."""

    inner: F._Placer
    svc: Service | None = None
    most: dict[str, int] = field(default_factory=dict)

    @property
    def hardware(self) -> str:
        return self.inner.hardware

    @property
    def precision(self) -> str:
        return self.inner.precision

    @property
    def model(self):  # type: ignore[no-untyped-def]
        return self.inner.model

    def apply(self, svc: Service, total: int, now: float, warm: bool = False) -> None:
        self.svc = svc
        self.inner.apply(svc, total, now, warm)
        for v, n in _held(svc).items():
            pool = self.inner.pools[v]
            assert n * pool.gpus_per_replica <= pool.gpus, (v, n, now)
            self.most[v] = max(self.most.get(v, 0), n)


@dataclass
class Steps:
    """Replicas by time: 12 for the first two minutes, then 2, then 6."""

    name: str = "steps"
    period_s: float = 20.0

    def act(self, ctx: Context, now: float) -> Action:
        return Action(12 if now < 120 else 2 if now < 180 else 6)


@pytest.mark.parametrize("kind", ["cost", "listed"])
def test_replicas_stay_within_pool_limits_in_a_run(kind: str) -> None:
    pools = (F.Pool("H100-SXM-80GB", 4, "fp8"), F.Pool("A100-SXM4-80GB", 3, "bf16"),
             F.Pool("MI300X-192GB", 2, "fp8"))
    inner: F._Placer = F.CostPlacer(pools, STRICT) if kind == "cost" else \
        F.OrderPlacer(pools, F.listed_order(pools))
    pl = Checked(inner)
    wl = _tiny()
    simulate(wl, {"ramp": Steps()}, placers={"ramp": pl})
    assert pl.svc is not None
    # Twelve replicas asked for fill all nine GPUs, never more.
    assert pl.most == {p.variant: p.gpus for p in pools}


def test_cost_is_price_times_gpu_hours_of_the_replicas_lifetimes() -> None:
    pl = Checked(F.CostPlacer(F.DEFAULT_FLEET, STRICT))
    wl = _tiny()
    run = simulate(wl, {"ramp": Steps()}, placers={"ramp": pl})
    svc = pl.svc
    assert svc is not None
    end = wl.trace.duration
    by_pool = {p.variant: p.product for p in F.DEFAULT_FLEET}
    expected = 0.0
    gpu_h = 0.0
    for r in svc.replicas + svc.retired:
        life = max(0.0, min(r.gone_at if r.gone_at >= 0 else end, end) - r.created) / 3600
        expected += DEFAULT_PRICES.per_gpu_hour(by_pool[r.pool]) * life
        gpu_h += life
    secs = run.tenants["ramp"].pool_gpu_seconds
    assert F.cost_of(secs, F.DEFAULT_FLEET) == pytest.approx(expected, rel=1e-9)
    assert run.gpu_hours == pytest.approx(gpu_h, rel=1e-9)
    # Twelve replicas span MI300X (0.80) and H100 (1.00): cost is neither 0.8 nor 1.0 x GPU-h.
    assert set(secs) == {MI300X, H100}
    assert 0.8 * gpu_h < expected < gpu_h


# --- the scenario and its report ---------------------------------------------------------
def test_table_has_one_row_per_policy_and_the_operator_at_one() -> None:
    res = F.run_fleet("strict", wl=_tiny(3.0))
    lines = F.table(res)
    rows = lines[2:]
    assert len(rows) == len(res.runs) == len(F.runs())
    labels = [row.split(" | ")[0].lstrip("| ") for row in rows]
    assert labels == [r.label for r in res.runs]
    assert len(set(labels)) == len(labels) and "peer" not in labels
    n_cols = lines[0].count("|")
    assert all(row.count("|") == n_cols for row in rows)
    op = rows[labels.index("slo-operator")].split(" | ")
    assert op[5] == "1.00"
    for r in res.runs:
        assert r.cost == pytest.approx(F.cost_of(r.run.tenants["ramp"].pool_gpu_seconds,
                                                 F.DEFAULT_FLEET))
        for p in F.DEFAULT_FLEET:
            assert r.pool_replica_hours[p.variant] <= p.gpus * res.duration_s / 3600 + 1e-9


def test_section_replaces_its_own_part_of_the_report(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "report.md"
    path.write_text("# report\n\nbefore\n")
    F.upsert(path, f"{F.BEGIN}\nfirst\n{F.END}\n")
    F.upsert(path, f"{F.BEGIN}\nsecond\n{F.END}\n")
    text = path.read_text()
    assert text.startswith("# report\n\nbefore\n")
    assert "second" in text and "first" not in text and text.count(F.BEGIN) == 1


def test_the_single_pool_rerun_keeps_the_fleet_section(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from slo_devtools.sim.command import _fleet_section

    path = tmp_path / "report.md"
    assert _fleet_section(path) == ""
    F.upsert(path, f"{F.BEGIN}\nfleet rows\n{F.END}\n")
    kept = _fleet_section(path)
    path.write_text("# fresh report\n")  # what render() writes
    F.upsert(path, kept)
    assert path.read_text() == f"# fresh report\n\n{F.BEGIN}\nfleet rows\n{F.END}\n"
