"""``slo-runtime launch``: the operator's engine configuration + the probe -> vLLM argv.

Input (set by the operator's pod template, see docs/runtime.md):

- ``SLO_ENGINE_ARGS``: JSON list of ``vllm serve`` arguments.
- ``SLO_EXPECTED_GPU_PRODUCT`` / ``SLO_EXPECTED_COMPUTE_CAPABILITY`` /
  ``SLO_EXPECTED_GPU_COUNT``: what the node labels promised.
- ``SLO_PROFILE_FILE`` (optional): this node's profile; native FP8 stays only if it says
  ``fp8_recommended``. ``SLO_FP8_POLICY=force`` keeps FP8 whatever the profile says.

What the GPU can run is decided by the rules in ``slo_runtime.contract`` (the ones the
operator planned with), so a setting the operator planned for this GPU is kept wherever vLLM
runs it: ``--quantization fp8`` on Ampere stays (weight-only through Marlin, sized at 8 bits
by the plan) under ``SLO_FP8_POLICY=force`` or when the probe finds the planned GPU. If the
node cannot do what was asked, the setting falls back to a safe one and every change is
logged as a WARNING with its reason (a crash loop would hide the cause). What was finally
started (argv, the settings, each change with a reason code) is written next to the probe
file (``contract.engine_info_path``) for the gateway to export as ``slo_runtime_engine_info``
and ``slo_runtime_engine_change``. Planning is pure (:func:`plan_launch`); only
:func:`run_launch` reads the environment, probes, writes and execs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from slo_runtime import contract as c
from slo_runtime.contract import VllmArgSpec, load_vllm_spec
from slo_runtime.probe import GpuInfo, ProbeResult, compare, probe

log = logging.getLogger("slo_runtime.launch")

DEFAULT_ENTRYPOINT = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]


@dataclass
class Arg:
    flag: str                 # canonical spelling
    values: list[str]


@dataclass
class Change:
    setting: str
    requested: str | None
    applied: str | None
    reason: str               # the whole sentence, for the log and the engine-info file
    code: str = ""            # one of contract.ENGINE_CHANGE_REASONS (the metric's label)

    def __str__(self) -> str:
        return f"{self.setting}: {self.requested!r} -> {self.applied!r} ({self.reason})"


@dataclass
class LaunchPlan:
    argv: list[str]
    changes: list[Change] = field(default_factory=list)
    # Settings kept as planned that deserve a word (FP8 weight-only, a risky FP8 KV cache).
    notes: list[str] = field(default_factory=list)
    # The `vllm serve` options alone (argv without the entrypoint).
    args: list[str] = field(default_factory=list)


def parse_engine_args(tokens: list[str], spec: VllmArgSpec) -> tuple[list[Arg], list[Change]]:
    """Tokens -> known flags with their values; unknown flags and bad choices dropped."""
    args: list[Arg] = []
    changes: list[Change] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-"):
            # `vllm serve MODEL` takes the model positionally; the API server wants --model.
            if not any(a.flag == "--model" for a in args):
                args.append(Arg("--model", [tok]))
            else:
                changes.append(Change(tok, tok, None, "stray positional argument dropped",
                                      "StrayArgument"))
            continue
        flag, eq, inline = tok.partition("=")
        canon = spec.canonical(flag)
        if canon is None:
            dropped = [tok]
            while not eq and i < len(tokens) and not tokens[i].startswith("-"):
                dropped.append(tokens[i])
                i += 1
            changes.append(Change(flag, " ".join(dropped), None,
                                  f"not an option of {spec.distribution}; dropped so the "
                                  "engine starts", "UnknownOption"))
            continue
        ent = spec.action(flag)
        assert ent is not None   # canonical() found it
        values: list[str] = []
        if eq:
            values = [inline]
        elif ent.nargs in ("+", "*"):
            while i < len(tokens) and not tokens[i].startswith("-"):
                values.append(tokens[i])
                i += 1
        elif ent.nargs == "?":
            if i < len(tokens) and not tokens[i].startswith("-"):
                values.append(tokens[i])
                i += 1
        elif ent.takes_value:
            if i < len(tokens):
                values.append(tokens[i])
                i += 1
            else:
                changes.append(Change(canon, None, None, "option without a value dropped",
                                      "MissingValue"))
                continue
        choices = ent.choices
        if choices and values and any(v not in choices for v in values):
            changes.append(Change(canon, " ".join(values), None,
                                  f"not one of vLLM's choices {list(choices)}; dropped",
                                  "InvalidChoice"))
            continue
        args = [a for a in args if a.flag != canon]   # last occurrence wins, like argparse
        args.append(Arg(canon, values))
    return args, changes


def _get(args: list[Arg], flag: str) -> str | None:
    for a in args:
        if a.flag == flag:
            return a.values[0] if a.values else ""
    return None


def _set(args: list[Arg], flag: str, value: str | None) -> None:
    rest = [a for a in args if a.flag != flag]
    args[:] = rest + ([Arg(flag, [value])] if value is not None else [])


def _gpu_text(gpu: GpuInfo) -> str:
    if gpu.count == 0:
        return "no GPU"
    what = "compute capability" if gpu.vendor == "nvidia" else "target"
    return f"{gpu.product} ({what} {gpu.compute_capability or '-'})"


def plan_launch(engine_args: list[str], gpu: GpuInfo, spec: VllmArgSpec, *,
                profile: dict[str, Any] | None = None, fp8_policy: str = "auto",
                gpu_as_planned: bool = False,
                host: str = c.VLLM_HOST, port: int = c.VLLM_PORT,
                entrypoint: list[str] | None = None) -> LaunchPlan:
    """Decide the final vLLM command line. Pure: every input is an argument.

    ``gpu_as_planned``: the probe found the GPUs the node labels promised, i.e. the ones
    the operator planned for. Only then (or, for FP8 weights, under ``fp8_policy="force"``:
    the user asked for ``precision: fp8``) is a setting kept that vLLM runs on this GPU but
    that only an explicit request makes the operator plan: FP8 weight-only through Marlin
    below 8.9, an FP8 KV cache below 8.9 (a known risk).
    """
    args, changes = parse_engine_args(engine_args, spec)
    notes: list[str] = []
    sup = gpu.support
    where = _gpu_text(gpu)

    def change(flag: str, new: str | None, reason: str, code: str) -> None:
        changes.append(Change(flag, _get(args, flag), new, reason, code))
        _set(args, flag, new)

    quant = _get(args, "--quantization")
    if quant is not None and quant not in spec.quantization_methods:
        change("--quantization", None, f"unknown quantization method for {spec.distribution}",
               "UnknownQuantization")
        quant = None
    if quant in c.FP8_QUANT_METHODS:
        if quant not in sup.fp8_methods:
            why = ("no native FP8, and only --quantization fp8 has the weight-only Marlin "
                   "fallback" if sup.fp8_weight_only else "no FP8 in vLLM")
            change("--quantization", None,
                   f"{where} cannot load --quantization {quant}: {why}; serving BF16/FP16 "
                   "weights", "NoFP8")
        elif sup.fp8_compute and fp8_policy != "force" and profile is not None and \
                not profile.get("fp8_recommended", False):
            change("--quantization", None,
                   "this node's profile does not show FP8 faster than BF16", "FP8NotFaster")
        elif not sup.fp8_compute and fp8_policy != "force" and not gpu_as_planned:
            change("--quantization", None,
                   f"{where} has no native FP8 and this is not the GPU the plan was made for "
                   "(FP8 weight-only through Marlin is kept only when planned, or under "
                   "SLO_FP8_POLICY=force); serving BF16/FP16 weights", "FP8NotNative")
        elif not sup.fp8_compute:
            notes.append(f"--quantization {quant} kept: {where} has no native FP8, so vLLM "
                         "runs it weight-only through FP8 Marlin (8-bit weights as planned, "
                         "16-bit compute)")
    kv = _get(args, "--kv-cache-dtype")
    if kv is not None and kv in c.FP8_KV_CACHE_DTYPES:
        if kv not in sup.fp8_kv_cache_dtypes:
            change("--kv-cache-dtype", "auto", f"{where} has no {kv} KV cache in vLLM",
                   "NoFP8KVCache")
        elif not sup.fp8_kv_cache and not gpu_as_planned:
            change("--kv-cache-dtype", "auto",
                   f"an FP8 KV cache has known failures on {where} (vLLM #26431, #7714) and "
                   "this is not the GPU the plan was made for", "FP8KVCacheRisk")
        elif not sup.fp8_kv_cache:
            notes.append(f"--kv-cache-dtype {kv} kept as planned on {where}, a known risk "
                         "there (vLLM #26431, #7714)")
    dtype = _get(args, "--dtype")
    if dtype == "bfloat16" and not sup.bf16:
        change("--dtype", "float16", f"{where} has no BF16", "NoBF16")
    tp = _get(args, "--tensor-parallel-size")
    if tp is not None and gpu.count > 0:
        try:
            tp_n = int(tp)
        except ValueError:
            tp_n = 0
        if tp_n > gpu.count or tp_n < 1:
            change("--tensor-parallel-size", str(gpu.count),
                   f"{gpu.count} GPUs visible in the pod, {tp} asked", "FewerGPUs")
    # The gateway owns the pod's serving port; vLLM listens on loopback behind it.
    for flag, value in (("--host", host), ("--port", str(port))):
        old = _get(args, flag)
        if old is not None and old != value:
            change(flag, value, "the gateway fronts vLLM on this address", "GatewayAddress")
        else:
            _set(args, flag, value)
    flat: list[str] = []
    for a in args:
        flat.append(a.flag)
        flat.extend(a.values)
    argv = list(entrypoint or DEFAULT_ENTRYPOINT) + flat
    return LaunchPlan(argv, changes, notes, flat)


def engine_info(plan: LaunchPlan, planned_args: list[str], gpu: GpuInfo,
                spec: VllmArgSpec) -> dict[str, Any]:
    """The engine-info document: what was planned, what runs, and why they differ."""
    return {
        "vllm": spec.distribution,
        "argv": plan.argv,
        "args": plan.args,
        "planned_args": planned_args,
        "settings": c.engine_settings(plan.args, spec),
        "planned_settings": c.engine_settings(planned_args, spec),
        "changes": [asdict(ch) for ch in plan.changes],
        "notes": plan.notes,
        "gpu": {"vendor": gpu.vendor, "product": gpu.product,
                "compute_capability": gpu.compute_capability, "count": gpu.count},
    }


def write_engine_info(path: str, doc: dict[str, Any]) -> None:
    """Replace ``path`` atomically: the gateway may read it at any moment."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".engine-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_env(env: dict[str, str]) -> dict[str, Any]:
    raw = env.get(c.ENV_ENGINE_ARGS, "[]")
    try:
        engine_args = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{c.ENV_ENGINE_ARGS} is not JSON: {e}") from e
    if not isinstance(engine_args, list) or not all(isinstance(x, str) for x in engine_args):
        raise ValueError(f"{c.ENV_ENGINE_ARGS} must be a JSON list of strings")
    count = env.get(c.ENV_EXPECTED_GPU_COUNT)
    return {
        "engine_args": engine_args,
        "expected_product": env.get(c.ENV_EXPECTED_GPU_PRODUCT) or None,
        "expected_cc": env.get(c.ENV_EXPECTED_COMPUTE_CAPABILITY) or None,
        "expected_count": int(count) if count else None,
        "profile_file": env.get(c.ENV_PROFILE_FILE) or None,
        "probe_file": env.get(c.ENV_PROBE_FILE) or None,
        "fp8_policy": env.get(c.ENV_FP8_POLICY, "auto"),
        "host": env.get(c.ENV_VLLM_HOST, c.VLLM_HOST),
        "port": int(env.get(c.ENV_VLLM_PORT, str(c.VLLM_PORT))),
        "entrypoint": json.loads(env[c.ENV_VLLM_ENTRYPOINT])
        if env.get(c.ENV_VLLM_ENTRYPOINT) else None,
    }


def run_launch(env: dict[str, str], *, gpu: GpuInfo | None = None,
               exec_fn: Callable[[str, list[str]], Any] | None = None,
               spec: VllmArgSpec | None = None) -> LaunchPlan:
    """Probe, plan, report, exec. ``exec_fn`` (default ``os.execvp``) replaces the
    process in production."""
    exec_fn = exec_fn or os.execvp
    cfg = read_env(env)
    gpu = gpu if gpu is not None else probe()
    res: ProbeResult = compare(gpu, cfg["expected_product"], cfg["expected_cc"],
                               cfg["expected_count"])
    log.info("Probed GPUs: %s", json.dumps(res.as_dict(), sort_keys=True))
    if not res.matches:
        log.error("GPUs differ from the node labels: %s", "; ".join(res.mismatches))
    if cfg["probe_file"]:
        with open(cfg["probe_file"], "w") as f:
            json.dump(res.as_dict(), f, sort_keys=True)
    profile = None
    if cfg["profile_file"]:
        try:
            with open(cfg["profile_file"]) as f:
                profile = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            log.warning("Ignored profile %s: %s", cfg["profile_file"], e)
    spec = spec or load_vllm_spec()
    as_planned = res.matches and bool(cfg["expected_product"] or cfg["expected_cc"])
    plan = plan_launch(cfg["engine_args"], gpu, spec, profile=profile,
                       fp8_policy=cfg["fp8_policy"], gpu_as_planned=as_planned,
                       host=cfg["host"], port=cfg["port"], entrypoint=cfg["entrypoint"])
    for ch in plan.changes:
        log.warning("Changed engine setting %s", ch)
    for note in plan.notes:
        log.info("%s", note)
    doc = engine_info(plan, cfg["engine_args"], gpu, spec)
    log.info("Engine settings: %s", json.dumps(doc["settings"], sort_keys=True))
    if cfg["probe_file"]:
        try:
            write_engine_info(c.engine_info_path(cfg["probe_file"]), doc)
        except OSError as e:
            log.warning("Could not write the engine info next to %s: %s", cfg["probe_file"], e)
    log.info("Starting vLLM: %s", json.dumps(plan.argv))
    sys.stdout.flush()
    sys.stderr.flush()
    exec_fn(plan.argv[0], plan.argv)
    return plan
