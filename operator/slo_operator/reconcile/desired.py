"""Pure planning for one InferenceService: spec + policy + nodes -> desired state.

No client, no clock: the caller passes what it observed and ``now``; the same function
backs the operator, ``slo-operator render`` and the tests. The chunked-prefill budget for
an inter-token objective is chosen here per variant (``reconcile.chunking``): the engine
planner takes it as an input, since the capacity model it comes from is not the engine's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.cluster import NodeInfo
from slo_operator.api.models import (
    HardwareStatus,
    InferenceServiceSpec,
    SLOPolicySpec,
)
from slo_operator.control import replica_bounds
from slo_operator.control.placement import VariantOption, rank, slo_rate
from slo_operator.control.prices import DEFAULT_PRICES, PriceList
from slo_operator.control.state import ControlState
from slo_operator.engine import (
    BatchBounds,
    EngineError,
    EnginePlan,
    EnginePrefs,
    GpuSharing,
    ModelFacts,
    default_max_num_batched_tokens,
    plan_engine,
    sets_option,
)
from slo_operator.engine.profiles import NodeProfile, fp8_verdict, match_profiles
from slo_operator.hardware import HardwareResolution, classify_node_pools, resolve_product
from slo_operator.reconcile.chunking import (
    ChunkChange,
    ChunkMemory,
    change,
    choose,
    decode_batch,
    engine_basis,
    itl_missed,
    jitter_missed,
    read_memory,
    request_shape,
    step_times,
)
from slo_operator.render.objects import RenderInput
from slo_operator.settings import default_runtime_image

DEFAULT_RUNTIME_IMAGE = default_runtime_image()  # this release's image (package metadata)

__all__ = ["NodeInfo"]  # re-exported: callers plan from node observations


@dataclass(frozen=True)
class Pool:
    """Nodes that share one hardware class (same identifying labels)."""

    resolution: HardwareResolution
    nodes: tuple[str, ...]
    gpus_per_node: int
    total_gpus: int

    @property
    def product(self) -> str:
        hw = self.resolution.hardware
        return hw.product if hw else "unknown"


def as_int(value: str | None) -> int:
    """A quantity label or allocatable count as an int; 0 when absent or not a number."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def discover_pools(nodes: Sequence[NodeInfo]) -> list[Pool]:
    """Group schedulable GPU nodes by the labels that identify their hardware class."""
    grouped: dict[tuple[tuple[str, str], ...], tuple[HardwareResolution, list[NodeInfo]]] = {}
    for node in nodes:
        if not node.schedulable:
            continue
        # A MIG mixed-strategy node offers one pool per slice profile.
        for res in classify_node_pools(node.labels):
            if res.hardware is None:
                continue
            key = tuple(sorted(dict(res.node_selector).items()))
            grouped.setdefault(key, (res, []))[1].append(node)
    pools = []
    for res, members in grouped.values():
        assert res.hardware is not None
        resource = res.hardware.resource_name
        shared = f"{resource}.shared"
        if res.shared and not any(as_int(n.allocatable.get(resource)) for n in members) and any(
            as_int(n.allocatable.get(shared)) for n in members
        ):
            # Time-slicing with renameByDefault advertises <resource>.shared instead
            # (NVIDIA GPU Operator, gpu-sharing docs).
            res = replace(res, hardware=replace(res.hardware, resource_name=shared))
            resource = shared
        per_node = [as_int(n.allocatable.get(resource)) or res.gpus_per_node for n in members]
        pools.append(
            Pool(
                resolution=res,
                nodes=tuple(sorted(n.name for n in members)),
                gpus_per_node=max(per_node),
                total_gpus=sum(per_node),
            )
        )
    return sorted(pools, key=lambda p: (p.product, p.nodes))


def pool_nodes(pool: Pool, nodes: Sequence[NodeInfo],
               selector: Mapping[str, str]) -> list[str]:
    """The pool's nodes that ``selector`` (the service's own node selector) allows."""
    if not selector:
        return list(pool.nodes)
    labels = {n.name: n.labels for n in nodes}
    return [n for n in pool.nodes
            if all(labels.get(n, {}).get(k) == v for k, v in selector.items())]


def pool_from_product(name: str) -> Pool | None:
    """A synthetic pool for previews (``render --gpu-product``)."""
    res = resolve_product(name)
    if res.hardware is None:
        return None
    return Pool(res, (), res.gpus_per_node, res.gpus_per_node)


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[-_ /]+", text.upper()) if t and t not in ("NVIDIA", "AMD")}


def product_matches(wanted: str, resolved: HardwareResolution, pool: Pool) -> bool:
    """Does a user's product name (``H100``, ``A100-80GB``) cover this pool?

    Every word of the name must be a word of the pool's product, so ``A100`` covers
    every A100 variant while ``L4`` does not cover ``L40S``; an exact catalogue match
    (``NVIDIA-H100-80GB-HBM3``) counts too.
    """
    hw = pool.resolution.hardware
    if hw is None:
        return False
    if resolved.hardware is not None and resolved.hardware.product == hw.product:
        return True
    return _tokens(wanted) <= _tokens(f"{hw.product} {hw.display_name}")


def _matches_selector(pool: Pool, nodes: Sequence[NodeInfo], selector: Mapping[str, str]) -> bool:
    if not selector or not pool.nodes:
        return True  # a preview pool (render --gpu-product) has no nodes to check
    return bool(pool_nodes(pool, nodes, selector))


@dataclass(frozen=True)
class Problem:
    """A reason not to deploy, with the field to fix."""

    reason: str
    field: str
    message: str


@dataclass(frozen=True)
class VariantPlan:
    """One pool's engine settings and render input for one service."""

    pool: Pool
    engine: EnginePlan
    render: RenderInput
    hardware_status: HardwareStatus
    notes: tuple[str, ...]
    option: VariantOption  # what placement needs (counts are filled by the reconciler)
    # The chunked-prefill budget chosen for the inter-token objective, to keep in status
    # (None: no objective, or the user set the budget), and its move, if it moved.
    chunk: ChunkMemory | None = None
    chunk_change: ChunkChange | None = None


@dataclass(frozen=True)
class ServicePlan:
    """The service's variants in placement order; the first (primary) one's pool, engine,
    render input and status are repeated at the top for callers that show one."""

    pool: Pool
    engine: EnginePlan
    render: RenderInput
    hardware_status: HardwareStatus
    notes: tuple[str, ...]
    variants: tuple[VariantPlan, ...] = ()

    @property
    def chunk_memory(self) -> dict[str, ChunkMemory]:
        """The chosen budgets to keep in ``status.control`` (``chunking.with_memory``)."""
        return {v.option.variant: v.chunk for v in self.variants if v.chunk is not None}

    @property
    def chunk_changes(self) -> tuple[ChunkChange, ...]:
        """The variants whose budget moves with this plan (``chunking.chunk_events``)."""
        return tuple(v.chunk_change for v in self.variants if v.chunk_change is not None)


def model_facts(spec: InferenceServiceSpec) -> ModelFacts:
    """The engine planner's view of spec.model."""
    m = spec.model
    return ModelFacts(
        name=m.name,
        served_name=m.served_name,
        params_billion=m.size_billions,
        max_model_len=m.max_model_len,
        num_layers=m.num_layers,
        num_kv_heads=m.num_kv_heads,
        num_attention_heads=m.num_attention_heads,
        head_dim=m.head_dim,
        quantized_checkpoint=m.quantized_checkpoint,
    )


def engine_prefs(spec: InferenceServiceSpec, policy: SLOPolicySpec) -> EnginePrefs:
    """The engine planner's view of spec.engine and the policy."""
    e = spec.engine
    return EnginePrefs(
        precision=e.precision,
        kv_cache_dtype=e.kv_cache_dtype,
        tensor_parallel_size=e.tensor_parallel_size or spec.hardware.gpus_per_replica,
        tensor_parallel_source=(
            "spec.hardware.gpusPerReplica"
            if e.tensor_parallel_size is None and spec.hardware.gpus_per_replica is not None
            else "spec.engine.tensorParallelSize"
        ),
        allow_quantization=policy.allow_quantization,
        gpu_memory_utilization=e.gpu_memory_utilization,
        max_num_batched_tokens=e.max_num_batched_tokens,
        extra_args=tuple(e.extra_args),
    )


def profile_prefs(
    prefs: EnginePrefs,
    product: str,
    bf16: bool,
    params_billion: float,
    profiles: Sequence[NodeProfile],
) -> tuple[EnginePrefs, str]:
    """``precision: auto`` follows a measured profile of this GPU and model size.

    FP8 weights are kept only where the profile found FP8 decode faster at every
    measured batch; an explicit ``precision`` is the user's and is left alone.
    """
    matches = match_profiles(product, params_billion, profiles)
    verdict = fp8_verdict(matches)
    if verdict is None or prefs.precision != "auto":
        return prefs, ""
    names = ", ".join(p.source for p in matches)
    if verdict:
        return prefs, f"FP8 kept: node profile {names} measured FP8 decode faster at every batch"
    return (
        replace(prefs, precision="bf16" if bf16 else "fp16"),
        f"FP8 weights off: node profile {names} found FP8 decode no faster on {product}",
    )


def batch_bounds(policy: SLOPolicySpec, restart_limit: int | None) -> BatchBounds:
    """Engine batch bounds: ``--max-num-seqs`` is pinned to ``maxBatch`` unless the policy
    moves the limit by restarts (``batching.mode: restart``), where it is that limit."""
    b = policy.batching
    initial = restart_limit if b.mode == "restart" else None
    return BatchBounds(min_seqs=b.min_batch, max_seqs=b.max_batch, initial=initial)


def user_sets_budget(spec: InferenceServiceSpec) -> bool:
    """Whether the user chose ``--max-num-batched-tokens`` (the spec field or extraArgs)."""
    e = spec.engine
    return e.max_num_batched_tokens is not None or sets_option(e.extra_args,
                                                                "max_num_batched_tokens")


def chunk_budget(spec: InferenceServiceSpec, policy: SLOPolicySpec, pool: Pool,
                 engine: EnginePlan, held: ChunkMemory | None, state: ControlState,
                 now: float | None) -> ChunkMemory | None:
    """The chunked-prefill budget for the policy's inter-token objective and jitter bound
    on ``pool`` (``reconcile.chunking``), from ``engine`` as planned without one (its
    precision, tensor parallelism and ``--max-num-seqs``); None where neither asks for one
    or the user set the budget. ``held``: the budget kept in status; ``state``: the law's
    memory (learnt speed and request shape, the last inter-token and jitter readings)."""
    itl = policy.objectives.inter_token_latency_ms
    cv = policy.objectives.throughput_cv_max
    hw = pool.resolution.hardware
    if (itl is None and cv is None) or hw is None or user_sets_budget(spec):
        return None
    precision = engine_precision(engine)
    tp, floor = engine.tensor_parallel_size, engine.max_num_seqs
    st, source = step_times(spec.model.size_billions, precision, hw.product, tp, state)
    batch = decode_batch(st, policy.objectives, state, policy.batching.min_batch, floor)
    return choose(st=st, source=source, itl_ms=None if itl is None else float(itl),
                  batch=batch, default=default_max_num_batched_tokens(hw), floor=floor,
                  engine=engine_basis(precision, tp, floor), held=held, now=now,
                  shape=request_shape(state), missed=itl_missed(state),
                  cv_max=None if cv is None else float(cv), jitter_over=jitter_missed(state))


def live_limit(policy: SLOPolicySpec, ceiling: int, wanted: int | None) -> int:
    """The in-flight limit the gateways enforce: the controller's choice in ``live`` mode,
    clamped to ``[minBatch, ceiling]``; the ceiling itself in ``restart`` and ``off``."""
    if policy.batching.mode != "live" or wanted is None:
        return ceiling
    return max(min(wanted, ceiling), min(policy.batching.min_batch, ceiling))


def candidate_pools(
    spec: InferenceServiceSpec, pools: Sequence[Pool], nodes: Sequence[NodeInfo]
) -> tuple[list[Pool], Problem | None]:
    """Pools allowed by the spec, in order of preference."""
    allowed = [p for p in pools if _matches_selector(p, nodes, spec.hardware.node_selector)]
    if not spec.hardware.gpu_products:
        if allowed:
            return allowed, None
        return [], Problem(
            C.NO_MATCHING_NODES,
            "spec.hardware.nodeSelector",
            "No schedulable GPU nodes match spec.hardware.nodeSelector"
            if spec.hardware.node_selector
            else "No schedulable nodes carry GPU labels (NVIDIA GFD, AMD labeller or Gaudi)",
        )
    ordered: list[Pool] = []
    for i, wanted in enumerate(spec.hardware.gpu_products):
        res = resolve_product(wanted)
        matching = [p for p in allowed if product_matches(wanted, res, p) and p not in ordered]
        if not matching and res.hardware is None and not any(
            product_matches(wanted, res, p) for p in pools
        ):
            return [], Problem(C.UNKNOWN_GPU, f"spec.hardware.gpuProducts[{i}]", res.message)
        ordered += matching
    if not ordered:
        wanted_s = ", ".join(spec.hardware.gpu_products)
        have = ", ".join(sorted({p.product for p in pools})) or "none"
        return [], Problem(
            C.NO_MATCHING_NODES,
            "spec.hardware.gpuProducts",
            f"No schedulable nodes with GPU products [{wanted_s}]; GPU pools present: {have}",
        )
    return ordered, None


def variant_id(pool: Pool) -> str:
    """Stable id of the service's variant on ``pool``: its product (and MIG slice) as a
    DNS label, which names the variant's Deployment and labels its pods."""
    hw = pool.resolution.hardware
    text = hw.product if hw is not None else "unknown"
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-") or "gpu"


def engine_precision(engine: EnginePlan) -> str:
    """The weights' precision an engine plan runs: fp8, fp16 or bf16."""
    if engine.quantization and "fp8" in engine.quantization:
        return "fp8"
    return "fp16" if engine.dtype == "float16" else "bf16"


def _preference(spec: InferenceServiceSpec, pool: Pool) -> int | None:
    for i, wanted in enumerate(spec.hardware.gpu_products):
        if product_matches(wanted, resolve_product(wanted), pool):
            return i
    return None


def _option(spec: InferenceServiceSpec, policy: SLOPolicySpec, pool: Pool, engine: EnginePlan,
            prices: PriceList) -> VariantOption:
    hw = pool.resolution.hardware
    assert hw is not None
    o = policy.objectives
    rate, meets = slo_rate(
        model_size_b=spec.model.size_billions, precision=engine_precision(engine),
        product=hw.product,
        gpus_per_replica=engine.tensor_parallel_size, e2e_ms=float(o.e2e_latency_ms),
        ttft_ms=float(o.ttft_ms),
        itl_ms=None if o.inter_token_latency_ms is None else float(o.inter_token_latency_ms),
        min_batch=policy.batching.min_batch, max_batch=engine.max_num_seqs,
    )
    return VariantOption(
        variant=variant_id(pool), product=hw.product,
        gpus_per_replica=engine.tensor_parallel_size,
        price_per_gpu_hour=prices.per_gpu_hour(hw.product, pool.resolution.replicas or 1),
        replica_rate=rate, meets_slo=meets, free_gpus=pool.total_gpus,
        preference=_preference(spec, pool),
    )


def plan_service(
    *,
    name: str,
    namespace: str,
    uid: str,
    spec: InferenceServiceSpec,
    policy: SLOPolicySpec,
    policy_name: str,
    pools: Sequence[Pool],
    nodes: Sequence[NodeInfo] = (),
    replicas: int,
    restart_limit: int | None = None,
    runtime_image: str = DEFAULT_RUNTIME_IMAGE,
    profiles: Sequence[NodeProfile] = (),
    prices: PriceList = DEFAULT_PRICES,
    control: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> ServicePlan | Problem:
    """One variant per pool where the model fits, in placement order.

    The order is ``control.placement.rank``: the user's ``gpuProducts`` order when given,
    else the lowest cost per unit of SLO-meeting throughput (``prices`` and the capacity
    model). The first variant is the primary: it carries ``replicas`` in the plan's own
    render input (a preview shows it); the reconciler splits the live replicas across
    variants with ``control.placement.place``. ``restart_limit`` is the batch limit to bake
    into ``--max-num-seqs`` under ``batching.mode: restart`` (ignored otherwise: the live
    limit never reaches the pod template). ``control``: the service's ``status.control``
    (the budgets kept for the inter-token objective, the law's learnt speed and request
    shape); ``now``: seconds since the epoch, for the budget's rate limit (None: the kept
    budgets move only when the objective or the engine settings change).
    """
    candidates, problem = candidate_pools(spec, pools, nodes)
    if problem:
        return problem
    variants: list[VariantPlan] = []
    first_error: EngineError | None = None
    kept = read_memory(control)
    state = ControlState.from_dict((control or {}).get("state"))
    for pool in candidates:
        hw = pool.resolution.hardware
        assert hw is not None
        prefs, profile_note = profile_prefs(
            engine_prefs(spec, policy), hw.product, hw.bf16, spec.model.size_billions, profiles
        )
        bounds = batch_bounds(policy, restart_limit)
        sharing = GpuSharing(mig=pool.resolution.mig, replicas=pool.resolution.replicas)
        held = kept.get(variant_id(pool))
        try:
            engine = plan_engine(hw, pool.gpus_per_node, model_facts(spec), prefs, bounds,
                                 sharing)
            unlevered = engine.max_num_batched_tokens
            chunk = chunk_budget(spec, policy, pool, engine, held, state, now)
            if chunk is not None:
                # Planned again with the budget: notes and memory estimates follow it.
                engine = plan_engine(hw, pool.gpus_per_node, model_facts(spec), prefs,
                                     replace(bounds, chunk=chunk.budget()), sharing)
        except EngineError as err:
            first_error = first_error or err
            continue
        old = held.running if held is not None else unlevered if chunk is not None else None
        moved = None if old is None else change(
            variant_id(pool), held, chunk, old, engine.max_num_batched_tokens,
            user_sets_budget(spec))
        variants.append(replace(
            _variant(name, namespace, uid, spec, policy, policy_name, pool, engine,
                     profile_note, replicas, runtime_image, prices),
            chunk=chunk, chunk_change=moved))
    if not variants:
        assert first_error is not None
        return Problem(C.ENGINE_INFEASIBLE, first_error.field, first_error.message)
    by_id = {v.option.variant: v for v in variants}
    ordered = tuple(by_id[o.variant] for o in rank([v.option for v in by_id.values()]))
    primary = ordered[0]
    others = tuple(replace(v, render=replace(v.render, replicas=0)) for v in ordered[1:])
    return ServicePlan(primary.pool, primary.engine, primary.render, primary.hardware_status,
                       primary.notes, (primary, *others))


def _variant(name: str, namespace: str, uid: str, spec: InferenceServiceSpec,
             policy: SLOPolicySpec, policy_name: str, pool: Pool, engine: EnginePlan,
             profile_note: str, replicas: int, runtime_image: str,
             prices: PriceList) -> VariantPlan:
    hw = pool.resolution.hardware
    assert hw is not None
    gpus = engine.tensor_parallel_size
    cc = hw.compute_capability
    option = _option(spec, policy, pool, engine, prices)
    render = RenderInput(
        name=name,
        namespace=namespace,
        uid=uid,
        engine_image=spec.engine.image,
        runtime_image=runtime_image,
        engine_args=engine.args,
        engine_env=tuple(engine.env) + tuple((e.name, e.value) for e in spec.engine.env),
        gpus_per_replica=gpus,
        gpu_resource=hw.resource_name,
        gpu_product=hw.product,
        pool_selector=dict(pool.resolution.node_selector),
        node_selector=dict(spec.hardware.node_selector),
        tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True)
                          for t in spec.hardware.tolerations),
        replicas=replicas,
        batch_ceiling=engine.max_num_seqs,
        tenant=policy.tenant or namespace,
        policy=policy_name,
        expected_compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
        # An explicit fp8 request keeps FP8 even where the node's profile finds no gain.
        fp8_policy="force" if spec.engine.precision == "fp8" else "auto",
        node_gpu_label=_product_label(pool),
        variant=option.variant,
    )
    status = HardwareStatus(
        vendor=hw.vendor,
        product=hw.product,
        architecture=hw.architecture,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else hw.gfx_target,
        memory_gi_b=hw.memory_gib,
        gpus_per_replica=gpus,
        fp8=engine.quantization is not None and "fp8" in engine.quantization,
    )
    notes = (
        ((profile_note,) if profile_note else ())
        + tuple(n.message for n in engine.notes)
        + tuple(f"{c.field}: {c.message}" for c in engine.conflicts)
    )
    return VariantPlan(pool, engine, render, status, notes, option)


_PRODUCT_LABELS = ("nvidia.com/gpu.product", "amd.com/gpu.product-name",
                   "beta.amd.com/gpu.product-name", "habana.ai/gaudi.product")


def _product_label(pool: Pool) -> str:
    selector = dict(pool.resolution.node_selector)
    return next((selector[k] for k in _PRODUCT_LABELS if k in selector), "")


def initial_replicas(spec: InferenceServiceSpec, policy: SLOPolicySpec) -> tuple[int, int]:
    """(min, max) replicas: the service's bounds narrow the policy's (the loop's own rule)."""
    return replica_bounds(policy, spec.replicas)
