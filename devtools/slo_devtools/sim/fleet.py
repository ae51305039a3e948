"""The mixed-fleet scenario: every policy on GPU pools of limited size and price.

A fleet is a list of pools (GPU product, GPUs, precision its replicas run at). A replica
on a pool runs with the shared step model (``slo_runtime.stepmodel``, the H200 profile)
moved to the pool's GPU as the operator's capacity model does
(``control.capacity.hardware_ratios``: decode by memory bandwidth, prefill by dense
compute at that precision; KV capacity from the GPU's memory).

Every policy decides a total replica count as in the single-pool benchmark; a *placer*
puts that total on pools:

* slo-operator: :class:`CostPlacer` runs ``control.placement.place`` on
  ``VariantOption``s built from the pools (price from ``control.prices``, SLO-meeting rate
  from ``control.placement.slo_rate``, free GPUs, current/scheduled/ready/pending from the
  simulated replicas): the operator's own functions.
* peers: :class:`OrderPlacer` fills pools in a fixed order (new replicas go to the first
  pool with free GPUs) and scales in from the last pool in that order that has replicas
  (last added, first removed). Peers scale one Deployment and have no placement of their
  own: their order is the order the fleet lists its pools. llm-d's workload variant
  autoscaler scales the cheapest variant up and the most expensive down, by a cost per
  replica set on each variant (``docs/benchmark.md`` cites its docs): its order is price
  per GPU-hour x GPUs per replica, ties by variant name.

A pool never holds more GPUs than it has: replicas that fit nowhere are not started (they
would be Pending) and the placer tries again on the policy's next pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from slo_devtools.sim import traces as T
from slo_devtools.sim.bench import TARGETS, Factory, candidates, step_model
from slo_devtools.sim.discrete_event import Phase, Service
from slo_devtools.sim.policies import Objectives, policy_spec
from slo_devtools.sim.run import RunResult, Tenant, Workload, simulate
from slo_operator.control.capacity import hardware_ratios
from slo_operator.control.placement import (
    VariantOption,
    describe_order,
    place,
    rank,
    slo_rate,
)
from slo_operator.control.prices import DEFAULT_PRICES, PriceList
from slo_operator.hardware import resolve_product
from slo_runtime.stepmodel import GIB, StepModel

MODEL_SIZE_B = 8.0  # Llama-3.1-8B, as the profile
MAX_REPLICAS = 40  # per service: the fleet's 48 GPUs bound it anyway
INITIAL_REPLICAS = 3  # every policy starts warm with these, placed by its own placer
# llm-d's 2 -> 10 -> 1 req/s ramp, x20 in rate and 3x shorter: 40 -> 200 -> 20 req/s in 20
# minutes, so that the peak needs more replicas than the fastest pool holds.
RATE_SCALE = 20.0
RAMP_PHASES: tuple[tuple[float, float, float], ...] = tuple(
    (d / 3.0, r0, r1) for d, r0, r1 in T.RAMP_PHASES)
NAME = "mixed-fleet"


@dataclass(frozen=True)
class Pool:
    """GPUs of one product that a service's replicas may run on."""

    product: str  # catalogue product (control.prices, data/gpus.yaml)
    gpus: int
    precision: str  # what its replicas run at: fp8 where the GPU has it, else bf16
    gpus_per_replica: int = 1

    @property
    def variant(self) -> str:
        """The variant id (the product as a DNS label, as the operator names variants)."""
        return re.sub(r"[^a-z0-9]+", "-", self.product.lower()).strip("-")


# The local fake fleet's pools (devenv.gpu_nodes), in its order.
DEFAULT_FLEET: tuple[Pool, ...] = (
    Pool("H100-SXM-80GB", 16, "fp8"),
    Pool("A100-SXM4-80GB", 16, "bf16"),
    Pool("L4-24GB", 8, "fp8"),
    Pool("MI300X-192GB", 8, "fp8"),
)


def pool_model(pool: Pool) -> StepModel:
    """The shared step model on ``pool``'s GPU at its precision."""
    bandwidth, compute = hardware_ratios(pool.product, pool.precision)
    hw = resolve_product(pool.product).hardware
    memory = int(hw.memory_gib * GIB) if hw is not None and hw.memory_gib else None
    return step_model(pool.precision).for_hardware(pool.product, bandwidth, compute, memory)


@dataclass(frozen=True)
class PoolUse:
    """One pool's replicas of a service, as the watch caches would show them."""

    active: int  # starting or ready (not draining): the Deployment's running pods
    ready: int
    held_gpus: int  # GPUs of starting, ready and draining replicas


def pool_use(svc: Service, pool: Pool) -> PoolUse:
    """What ``svc`` holds on ``pool`` now."""
    reps = [r for r in svc.replicas if r.pool == pool.variant]
    active = [r for r in reps if r.phase in (Phase.STARTING, Phase.READY)]
    return PoolUse(len(active), sum(1 for r in active if r.phase is Phase.READY),
                   len(reps) * pool.gpus_per_replica)


def room(svc: Service, pool: Pool) -> int:
    """Replicas ``pool`` can run for ``svc`` now: its active ones plus its free GPUs."""
    use = pool_use(svc, pool)
    free = max(0, pool.gpus - use.held_gpus)
    return use.active + free // max(1, pool.gpus_per_replica)


class _Placer:
    """Shared by the placers: pools, their step models, pending replicas, the apply."""

    def __init__(self, pools: Sequence[Pool], order: Sequence[str]) -> None:
        self.pools = {p.variant: p for p in pools}
        self.models = {p.variant: pool_model(p) for p in pools}
        self.order = tuple(order)
        first = self.pools[self.order[0]]
        self.hardware = first.product
        self.precision = first.precision
        self.model = self.models[first.variant]
        self.pending: dict[str, int] = {v: 0 for v in self.pools}

    def counts(self, svc: Service, total: int) -> dict[str, int]:
        raise NotImplementedError

    def apply(self, svc: Service, total: int, now: float, warm: bool = False) -> None:
        """Place ``total`` replicas; start only what fits (the rest waits, Pending)."""
        want = self.counts(svc, max(0, total))
        fit = {v: min(n, room(svc, self.pools[v])) for v, n in want.items()}
        self.pending = {v: want[v] - fit[v] for v in want}
        svc.set_placement(fit, self.models, now, desired=max(0, total), warm=warm)


class CostPlacer(_Placer):
    """slo-operator: ``control.placement.place`` on the pools as variants."""

    def __init__(self, pools: Sequence[Pool], objectives: Objectives, *,
                 prices: PriceList = DEFAULT_PRICES, max_num_seqs: int = 256,
                 model_size_b: float = MODEL_SIZE_B) -> None:
        spec = policy_spec(objectives, MAX_REPLICAS)
        self.base: dict[str, VariantOption] = {}
        for p in pools:
            rate, meets = slo_rate(
                model_size_b=model_size_b, precision=p.precision, product=p.product,
                gpus_per_replica=p.gpus_per_replica, e2e_ms=objectives.e2e_ms,
                ttft_ms=objectives.ttft_ms, itl_ms=objectives.itl_p99_ms,
                min_batch=spec.batching.min_batch, max_batch=max_num_seqs)
            self.base[p.variant] = VariantOption(
                variant=p.variant, product=p.product, gpus_per_replica=p.gpus_per_replica,
                price_per_gpu_hour=prices.per_gpu_hour(p.product), replica_rate=rate,
                meets_slo=meets)
        super().__init__(pools, [o.variant for o in rank(list(self.base.values()))])

    def options(self, svc: Service) -> list[VariantOption]:
        """Each variant's placement facts from the simulated replicas."""
        out = []
        for v, o in self.base.items():
            pool = self.pools[v]
            use = pool_use(svc, pool)
            pending = self.pending.get(v, 0)
            out.append(replace(o, free_gpus=max(0, pool.gpus - use.held_gpus),
                               current=use.active + pending, scheduled=use.active,
                               ready=use.ready, pending=pending))
        return out

    def counts(self, svc: Service, total: int) -> dict[str, int]:
        return dict(place(total, self.options(svc)).replicas)


class OrderPlacer(_Placer):
    """A fixed order: grow on the first pool with room, shrink from the last one used."""

    def counts(self, svc: Service, total: int) -> dict[str, int]:
        out = {v: pool_use(svc, self.pools[v]).active for v in self.order}
        more = total - sum(out.values())
        for v in self.order:
            if more <= 0:
                break
            take = min(more, max(0, room(svc, self.pools[v]) - out[v]))
            out[v] += take
            more -= take
        if more > 0:
            out[self.order[0]] += more  # fits nowhere: waits on the first pool
        for v in reversed(self.order):
            if more >= 0:
                break
            take = min(-more, out[v])
            out[v] -= take
            more += take
        return out


def listed_order(pools: Sequence[Pool]) -> list[str]:
    """The order the fleet lists its pools (what a policy without placement gets)."""
    return [p.variant for p in pools]


def price_order(pools: Sequence[Pool], prices: PriceList = DEFAULT_PRICES) -> list[str]:
    """Cheapest cost per replica first, ties by variant name (llm-d WVA's order)."""
    return [p.variant for p in sorted(
        pools, key=lambda p: (prices.per_gpu_hour(p.product) * p.gpus_per_replica, p.variant))]


# --- the scenario -------------------------------------------------------------------------
def workload(target_set: str = "strict", seed: int = 0) -> Workload:
    """The compressed ramp as one chat tenant with the objectives of ``target_set``."""
    if target_set not in TARGETS:
        raise ValueError(f"targets: unknown set {target_set!r}; known: {sorted(TARGETS)}")
    tr = T.ramp(rate_scale=RATE_SCALE, phases=RAMP_PHASES, seed=seed)
    tenant = Tenant("ramp", step_model(), TARGETS[target_set]["chat"],
                    max_replicas=MAX_REPLICAS, initial_replicas=INITIAL_REPLICAS)
    return Workload(NAME, tr, (tenant,))


PlacerFactory = Callable[[Tenant], _Placer]


def runs(pools: Sequence[Pool] = DEFAULT_FLEET, prices: PriceList = DEFAULT_PRICES
         ) -> list[tuple[str, Factory, PlacerFactory]]:
    """(label, policy factory, placer factory) of every run of the scenario: every policy
    family of the benchmark (a sweep's first point: the lowest per-replica target, its most
    provisioned) with its own placement, and slo-operator's replica counts with the peers'
    order (what placement alone is worth). Labels ``"peer"`` take the policy's name."""
    def listed(t: Tenant) -> _Placer:
        return OrderPlacer(pools, listed_order(pools))

    def wva(t: Tenant) -> _Placer:
        return OrderPlacer(pools, price_order(pools, prices))

    def cost(t: Tenant) -> _Placer:
        return CostPlacer(pools, t.objectives, prices=prices, max_num_seqs=t.max_num_seqs)

    out: list[tuple[str, Factory, PlacerFactory]] = []
    op: Factory | None = None
    seen: set[str] = set()
    for family, make in candidates():
        if family == "slo-operator":
            op = make
            continue
        if family in seen:
            continue
        seen.add(family)
        placer = wva if family == "llm-d-wva" else listed
        out.append(("peer", make, placer))
    assert op is not None
    out.append(("slo-operator", op, cost))
    out.append(("slo-operator, listed order", op, listed))
    return out


@dataclass
class FleetRun:
    """One policy on the fleet: the run, its placement order and cost."""

    label: str
    run: RunResult
    order: tuple[str, ...]  # variants, in the order its placer fills them
    pool_replica_hours: dict[str, float]  # by variant
    cost: float


def cost_of(pool_gpu_seconds: Mapping[str, float], pools: Sequence[Pool],
            prices: PriceList = DEFAULT_PRICES) -> float:
    """Sum over pools of price per GPU-hour x GPU-hours."""
    by = {p.variant: p for p in pools}
    return sum(prices.per_gpu_hour(by[v].product) * s / 3600.0
               for v, s in pool_gpu_seconds.items() if s)


@dataclass
class FleetResult:
    target_set: str
    pools: tuple[Pool, ...]
    runs: list[FleetRun] = field(default_factory=list)
    n_requests: int = 0
    duration_s: float = 0.0
    notes: tuple[str, ...] = ()
    slo_order: str = ""  # describe_order of slo-operator's variants


def run_fleet(target_set: str = "strict", seed: int = 0, pools: Sequence[Pool] = DEFAULT_FLEET,
              prices: PriceList = DEFAULT_PRICES,
              tick: Callable[[str], None] | None = None,
              wl: Workload | None = None) -> FleetResult:
    """Every run of :func:`runs` on the compressed ramp (``wl`` replaces it)."""
    wl = wl or workload(target_set, seed)
    t = wl.tenants[0]
    res = FleetResult(target_set, tuple(pools), n_requests=len(wl.trace.requests),
                      duration_s=wl.trace.duration, notes=wl.trace.notes)
    cp = CostPlacer(pools, t.objectives, prices=prices, max_num_seqs=t.max_num_seqs)
    res.slo_order = describe_order(rank(list(cp.base.values())))
    for label, make, make_placer in runs(pools, prices):
        placer = make_placer(t)
        run = simulate(wl, {t.name: make(t)}, label=None if label == "peer" else label,
                       placers={t.name: placer})
        secs = run.tenants[t.name].pool_gpu_seconds
        label = run.policy
        res.runs.append(FleetRun(label, run, placer.order,
                                 {v: secs.get(v, 0.0) / 3600.0 / max(1, p.gpus_per_replica)
                                  for v, p in placer.pools.items()},
                                 cost_of(secs, pools, prices)))
        if tick:
            tick(label)
    return res


# --- the report section -------------------------------------------------------------------
BEGIN = "<!-- mixed-fleet:begin -->"
END = "<!-- mixed-fleet:end -->"


def _short(product: str) -> str:
    return product.split("-")[0]


def table(res: FleetResult) -> list[str]:
    """One row per run: attainment, GPU-hours, cost, cost vs slo-operator, placement."""
    ref = next(r for r in res.runs if r.label == "slo-operator")
    names = [_short(p.product) for p in res.pools]
    head = ("| policy | placement order | SLO attainment % | GPU-h | cost | x slo-operator | "
            + " | ".join(f"{n} replica-h" for n in names) + " |")
    lines = [head, "|" + "---|" * (6 + len(names))]
    for r in res.runs:
        order = " > ".join(_short(res_pool.product) for v in r.order
                           for res_pool in res.pools if res_pool.variant == v)
        per = " | ".join(f"{r.pool_replica_hours.get(p.variant, 0.0):.2f}" for p in res.pools)
        ratio = r.cost / ref.cost if ref.cost else math.nan
        lines.append(f"| {r.label} | {order} | {r.run.min_attainment * 100:.1f} | "
                     f"{r.run.gpu_hours:.2f} | {r.cost:.2f} | {ratio:.2f} | {per} |")
    return lines


def section(results: Sequence[FleetResult], cpu_s: float,
            prices: PriceList = DEFAULT_PRICES) -> str:
    """The Markdown section of the report (between :data:`BEGIN` and :data:`END`)."""
    first = results[0]
    fleet = ", ".join(f"{p.product} x{p.gpus} ({p.precision}, "
                      f"{prices.per_gpu_hour(p.product):.2f}/GPU-h)" for p in first.pools)
    lines = [BEGIN, "## Mixed fleet: cost and placement", "",
             "Generated by `slo-operator bench --scenario mixed-fleet`; method and "
             "assumptions: `docs/benchmark.md` (Mixed fleet). Cost is the sum over pools of "
             "price per GPU-hour (relative, H100 SXM = 1.00) x GPU-hours.", "",
             f"- fleet: {fleet}",
             *[f"- {n}" for n in first.notes],
             f"- {first.n_requests:,} requests over {first.duration_s / 60:.0f} min; at most "
             f"{MAX_REPLICAS} replicas; every policy starts with {INITIAL_REPLICAS} warm "
             "replicas placed by its own placement",
             "- peers fill pools in the order the fleet lists them and scale in from the "
             "last pool used; llm-d-wva in its own cost order (price per replica); "
             "slo-operator by `control.placement.place`; `slo-operator, listed order` is "
             "the operator's replica counts with the peers' order",
             f"- the scenario took {cpu_s:.0f} s of CPU", ""]
    for res in results:
        t = workload(res.target_set).tenants[0]
        lines += [f"### {res.target_set} targets ({t.objectives.describe()})", "",
                  f"slo-operator's order: {res.slo_order}", "", *table(res), ""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def upsert(path: Path, text: str) -> None:
    """Put ``text`` (a section with its markers) into ``path``, replacing the one there."""
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        new = head + text + tail
    else:
        new = old + ("\n" if old and not old.endswith("\n\n") else "") + text
    path.write_text(new)


def write(results: Sequence[FleetResult], out: Path, cpu_s: float) -> Path:
    """Write the section into ``out/report.md`` (kept apart from the other scenarios)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    upsert(path, section(results, cpu_s))
    return path

