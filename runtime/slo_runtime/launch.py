"""``slo-runtime launch``: the operator's engine configuration + the probe -> vLLM argv.

Input (set by the operator's pod template, see docs/runtime.md):

- ``SLO_ENGINE_ARGS``: JSON list of ``vllm serve`` arguments.
- ``SLO_EXPECTED_GPU_PRODUCT`` / ``SLO_EXPECTED_COMPUTE_CAPABILITY`` /
  ``SLO_EXPECTED_GPU_COUNT``: what the node labels promised.
- ``SLO_PROFILE_FILE`` (optional): this node's profile; FP8 stays only if it says
  ``fp8_recommended``. ``SLO_FP8_POLICY=force`` keeps FP8 whenever the GPU has it.

If the node cannot do what was asked, the setting falls back to a safe one and every
change is logged as a WARNING with its reason (a crash loop would hide the cause).
Planning is pure (:func:`plan_launch`); only :func:`main` reads the environment, probes
and execs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
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
    reason: str

    def __str__(self) -> str:
        return f"{self.setting}: {self.requested!r} -> {self.applied!r} ({self.reason})"


@dataclass
class LaunchPlan:
    argv: list[str]
    changes: list[Change] = field(default_factory=list)


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
                changes.append(Change(tok, tok, None, "stray positional argument dropped"))
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
                                  "engine starts"))
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
                changes.append(Change(canon, None, None, "option without a value dropped"))
                continue
        choices = ent.choices
        if choices and values and any(v not in choices for v in values):
            changes.append(Change(canon, " ".join(values), None,
                                  f"not one of vLLM's choices {list(choices)}; dropped"))
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


def plan_launch(engine_args: list[str], gpu: GpuInfo, spec: VllmArgSpec, *,
                profile: dict[str, Any] | None = None, fp8_policy: str = "auto",
                host: str = c.VLLM_HOST, port: int = c.VLLM_PORT,
                entrypoint: list[str] | None = None) -> LaunchPlan:
    """Decide the final vLLM command line. Pure: every input is an argument."""
    args, changes = parse_engine_args(engine_args, spec)

    def change(flag: str, new: str | None, reason: str) -> None:
        changes.append(Change(flag, _get(args, flag), new, reason))
        _set(args, flag, new)

    quant = _get(args, "--quantization")
    if quant is not None and quant not in spec.quantization_methods:
        change("--quantization", None, f"unknown quantization method for {spec.distribution}")
        quant = None
    if quant in c.FP8_QUANT_METHODS:
        if not gpu.fp8_native:
            change("--quantization", None,
                   f"{gpu.product or 'no GPU'} (compute capability "
                   f"{gpu.compute_capability or '-'}) has no native FP8; serving BF16/FP16 "
                   "weights")
        elif fp8_policy != "force" and profile is not None and \
                not profile.get("fp8_recommended", False):
            change("--quantization", None,
                   "this node's profile does not show FP8 faster than BF16")
    kv = _get(args, "--kv-cache-dtype")
    if kv is not None and kv in c.FP8_KV_CACHE_DTYPES and not gpu.fp8_native:
        change("--kv-cache-dtype", "auto",
               f"FP8 KV cache is unreliable without native FP8 on {gpu.product or 'no GPU'}")
    dtype = _get(args, "--dtype")
    if dtype == "bfloat16" and not gpu.bf16:
        change("--dtype", "float16",
               f"{gpu.product or 'no GPU'} (compute capability "
               f"{gpu.compute_capability or '-'}) has no BF16")
    tp = _get(args, "--tensor-parallel-size")
    if tp is not None and gpu.count > 0:
        try:
            tp_n = int(tp)
        except ValueError:
            tp_n = 0
        if tp_n > gpu.count or tp_n < 1:
            change("--tensor-parallel-size", str(gpu.count),
                   f"{gpu.count} GPUs visible in the pod, {tp} asked")
    # The gateway owns the pod's serving port; vLLM listens on loopback behind it.
    for flag, value in (("--host", host), ("--port", str(port))):
        old = _get(args, flag)
        if old is not None and old != value:
            change(flag, value, "the gateway fronts vLLM on this address")
        else:
            _set(args, flag, value)
    argv = list(entrypoint or DEFAULT_ENTRYPOINT)
    for a in args:
        argv.append(a.flag)
        argv.extend(a.values)
    return LaunchPlan(argv, changes)


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
    plan = plan_launch(cfg["engine_args"], gpu, spec or load_vllm_spec(), profile=profile,
                       fp8_policy=cfg["fp8_policy"], host=cfg["host"], port=cfg["port"],
                       entrypoint=cfg["entrypoint"])
    for ch in plan.changes:
        log.warning("Changed engine setting %s", ch)
    log.info("Starting vLLM: %s", json.dumps(plan.argv))
    sys.stdout.flush()
    sys.stderr.flush()
    exec_fn(plan.argv[0], plan.argv)
    return plan
