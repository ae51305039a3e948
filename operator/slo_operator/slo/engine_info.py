"""What each pod really runs, against the plan (pure).

The in-pod launcher may change a planned engine setting when it starts vLLM (FP8 weights on
a GPU without FP8, an FP8 KV cache on a GPU where it is a known failure, fewer GPUs than
the tensor-parallel size; ``slo_runtime.launch``). It records what it ran, and the pod's
gateway exports the record as ``slo_runtime_engine_info`` (labels: the settings, as
``vllm serve`` destinations) and one ``slo_runtime_engine_change`` per change (setting,
requested, applied, reason code); names and codes are ``slo_runtime.contract``'s. The
``engine`` query of ``slo.promql`` returns both per pod.

Here the rows become, per service and pod, the reported settings and changes
(:func:`parse_engine_info`); per variant, what its pods run against that variant's planned
``vllm serve`` arguments (:func:`observe_variants`); and the service's ``EngineMismatch``
condition (:func:`engine_condition`):

- True ``EngineDiffers`` when a pod runs a setting other than planned and the launcher
  says it changed that setting (the message names variant, setting, planned and running
  values and the launcher's reason);
- False ``RollingOut`` when pods differ only in settings no launcher changed: they were
  started from an earlier plan's template, which the rollout replaces;
- False ``EngineMatches`` when every reporting pod runs the plan;
- Unknown ``NotReported`` while no pod reports (pods without the slo-runtime gateway, or
  not scraped yet).

Values are compared normalised: both sides are read by ``contract.engine_settings`` (the
launcher's own reading: ``half`` is ``float16``, ``8k`` is ``8000``) and no quantization is
``""`` whether spelt ``none`` or left out. Only pods the operator sees in the variant count,
so series of deleted pods never speak for it. The result holds no pod names and no times,
and is sorted, so that it is the same pass after pass while nothing changes (status is
written on any change of ``variants``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond
from slo_operator.api.models import EngineChangeStatus, EngineObserved
from slo_operator.api.observe import ServiceKey
from slo_operator.slo.promql import ENGINE_FAMILY_CHANGE, ENGINE_FAMILY_INFO
from slo_runtime import contract as c

Settings = tuple[tuple[str, str], ...]  # (dest, value) in contract.ENGINE_INFO_LABELS order
INT_SETTINGS = ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens")


@dataclass(frozen=True, order=True)
class EngineChange:
    """One setting the launcher changed: ``setting`` is the ``vllm serve`` flag."""

    setting: str
    requested: str
    applied: str
    reason: str


@dataclass(frozen=True)
class PodEngine:
    """What one pod reports: its settings (normalised; None when only changes were seen)
    and the launcher's changes, sorted."""

    settings: Settings | None
    changes: tuple[EngineChange, ...] = ()


@dataclass(frozen=True)
class Difference:
    """A setting some reporting pods of a variant run other than planned, and the reason
    codes of the launcher changes that explain it (none: an earlier plan's pod)."""

    setting: str  # the `vllm serve` destination, e.g. kv_cache_dtype
    planned: str
    running: str
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantEngine:
    """What a variant's reporting pods run, against its plan."""

    settings: Settings  # what most reporting pods run
    pods: int
    pods_on_plan: int
    agree: bool
    changes: tuple[EngineChange, ...]
    differences: tuple[Difference, ...]

    @property
    def matches_plan(self) -> bool:
        return self.pods_on_plan == self.pods


@cache
def _spec() -> c.VllmArgSpec:
    return c.load_vllm_spec()


@cache
def normalise(dest: str, value: str) -> str:
    """A reported or planned value of setting ``dest`` as ``contract.engine_settings`` reads
    it from the command line; no quantization is ``""``."""
    v = value.strip()
    if not v or (dest == "quantization" and v.lower() == "none"):
        return ""
    action = _spec().by_dest(dest)
    if action is None:
        return v
    flag = next((f for f in action.flags if f.startswith("--")), action.flags[0])
    return c.engine_settings([flag, v], _spec()).get(dest, v)


@cache
def planned_settings(args: tuple[str, ...]) -> Settings:
    """The settings a plan's ``vllm serve`` arguments set, normalised (cached: the same
    plan's arguments come back every pass)."""
    got = c.engine_settings(args, _spec())
    return tuple((d, normalise(d, got.get(d, ""))) for d in c.ENGINE_INFO_LABELS)


@cache
def setting_dest(flag: str) -> str:
    """The destination a launcher change's flag sets (``--kv-cache-dtype`` ->
    ``kv_cache_dtype``); an unknown flag stays as it is."""
    action = _spec().action(flag)
    return action.dest if action is not None else flag


def shown(dest: str, value: str) -> str:
    """A value as users read it: no quantization is ``none``."""
    return "none" if dest == "quantization" and not value else value


def flag_of(dest: str) -> str:
    """The long ``vllm serve`` flag of a destination, for messages."""
    action = _spec().by_dest(dest)
    return next((f for f in action.flags if f.startswith("--")), dest) if action else dest


# ---------------------------------------------------------------- the query's rows


def parse_engine_info(result: Sequence[Mapping[str, Any]] | None
                      ) -> dict[ServiceKey, dict[str, PodEngine]] | None:
    """Per service (keyed by the pods' ``service`` label) and pod: what the ``engine``
    query's rows report. None when the query failed (nothing is known this pass); rows
    without namespace, service or pod, or of neither family, are skipped."""
    if result is None:
        return None
    infos: dict[tuple[ServiceKey, str], set[Settings]] = defaultdict(set)
    changes: dict[tuple[ServiceKey, str], set[EngineChange]] = defaultdict(set)
    for item in result:
        labels = item.get("metric") if isinstance(item, Mapping) else None
        if not isinstance(labels, Mapping):
            continue
        ns, svc, pod = (labels.get(k) for k in ("namespace", "service", "pod"))
        if not all(isinstance(x, str) and x for x in (ns, svc, pod)):
            continue
        where = (ServiceKey(str(ns), str(svc)), str(pod))
        family = labels.get("family")
        if family == ENGINE_FAMILY_INFO:
            infos[where].add(tuple((d, normalise(d, str(labels.get(d, ""))))
                                   for d in c.ENGINE_INFO_LABELS))
        elif family == ENGINE_FAMILY_CHANGE and labels.get("setting"):
            changes[where].add(EngineChange(*(str(labels.get(k, ""))
                                              for k in c.ENGINE_CHANGE_LABELS)))
    out: dict[ServiceKey, dict[str, PodEngine]] = defaultdict(dict)
    for where in sorted(set(infos) | set(changes),
                        key=lambda w: (w[0].namespace, w[0].name, w[1])):
        # Two settings series for one pod only overlap while Prometheus marks the older
        # one stale (a restarted vLLM container): the first in order stands for the pod.
        seen = sorted(infos.get(where, ()))
        out[where[0]][where[1]] = PodEngine(seen[0] if seen else None,
                                            tuple(sorted(changes.get(where, ()))))
    return dict(out)


# ---------------------------------------------------------------- against the plan


def compare(planned: Settings, pods: Iterable[PodEngine]) -> VariantEngine | None:
    """One variant's reporting pods against its planned settings; None when no pod
    reports its settings."""
    reporting = [p for p in pods if p.settings is not None]
    if not reporting:
        return None
    plan = dict(planned)
    counts = Counter(p.settings for p in reporting if p.settings is not None)
    # The most common settings; ties go to the first in order, so the choice is stable.
    top = min(counts, key=lambda s: (-counts[s], s))
    changes = tuple(sorted({ch for p in reporting for ch in p.changes}))
    diffs: dict[tuple[str, str], set[str]] = defaultdict(set)
    on_plan = 0
    for p in reporting:
        assert p.settings is not None
        off = [(d, v) for d, v in p.settings if v != plan.get(d, "")]
        on_plan += not off
        for d, v in off:
            diffs[(d, v)].update(ch.reason for ch in p.changes
                                 if setting_dest(ch.setting) == d and ch.reason)
    differences = tuple(Difference(d, plan.get(d, ""), v, tuple(sorted(r)))
                        for (d, v), r in sorted(diffs.items()))
    return VariantEngine(top, len(reporting), on_plan, len(counts) == 1, changes, differences)


def observe_variants(planned: Mapping[str, Sequence[str]], pod_variants: Mapping[str, str],
                     reports: Mapping[str, PodEngine]) -> dict[str, VariantEngine]:
    """Per variant with a reporting pod: what its pods run against its plan.
    ``planned``: each variant's ``vllm serve`` arguments; ``pod_variants``: the variant of
    each pod the operator sees (pods of variants not planned are left out); ``reports``:
    the service's rows of :func:`parse_engine_info`."""
    by_variant: dict[str, list[PodEngine]] = defaultdict(list)
    for pod, variant in sorted(pod_variants.items()):
        if variant in planned and pod in reports:
            by_variant[variant].append(reports[pod])
    out = {}
    for variant, pods in sorted(by_variant.items()):
        got = compare(planned_settings(tuple(planned[variant])), pods)
        if got is not None:
            out[variant] = got
    return out


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def observed_status(v: VariantEngine) -> EngineObserved:
    """``status.variants[].engineObserved`` of one variant."""
    s = dict(v.settings)
    return EngineObserved.model_validate({
        "quantization": shown("quantization", s.get("quantization", "")),
        "kvCacheDtype": s.get("kv_cache_dtype") or None,
        "dtype": s.get("dtype") or None,
        **{k: _int(s.get(d, "")) for k, d in (("tensorParallelSize", "tensor_parallel_size"),
                                             ("maxNumSeqs", "max_num_seqs"),
                                             ("maxNumBatchedTokens", "max_num_batched_tokens"))},
        "pods": v.pods,
        "podsOnPlan": v.pods_on_plan,
        "agree": v.agree,
        "matchesPlan": v.matches_plan,
        "changes": [EngineChangeStatus(setting=ch.setting, requested=ch.requested,
                                       applied=ch.applied, reason=ch.reason)
                    for ch in v.changes],
    })


def _difference(variant: str, d: Difference) -> str:
    text = (f"variant {variant}: {flag_of(d.setting)} planned {shown(d.setting, d.planned)}, "
            f"running {shown(d.setting, d.running)}")
    if d.reasons:
        why = "; ".join(f"{r}: {c.ENGINE_CHANGE_REASONS.get(r, 'no description')}"
                        for r in d.reasons)
        text += f" (launcher: {why})"
    return text


def engine_condition(observed: Mapping[str, VariantEngine]) -> Cond:
    """The service's EngineMismatch condition from every variant's observation."""
    if not observed:
        return Cond(C.ENGINE_MISMATCH, None, C.NOT_REPORTED,
                    "No pod reports the engine settings it runs (slo_runtime_engine_info): "
                    "pods without the slo-runtime gateway, or not scraped yet")
    changed = [_difference(v, d) for v, o in sorted(observed.items())
               for d in o.differences if d.reasons]
    if changed:
        return Cond(C.ENGINE_MISMATCH, True, C.ENGINE_DIFFERS,
                    "Pods run other engine settings than planned: " + "; ".join(changed))
    older = [_difference(v, d) for v, o in sorted(observed.items()) for d in o.differences]
    if older:
        return Cond(C.ENGINE_MISMATCH, False, C.ROLLING_OUT,
                    "Pods started from an earlier plan still run: " + "; ".join(older)
                    + "; the rollout replaces them")
    return Cond(C.ENGINE_MISMATCH, False, C.ENGINE_MATCHES,
                "Every reporting pod runs the planned engine settings (variants "
                + ", ".join(sorted(observed)) + ")")
