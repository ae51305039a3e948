"""The development commands: ``slo-operator demo`` and ``slo-operator bench`` (added to the
operator's CLI through the ``slo_operator.commands`` entry points of this distribution) and
``slo-devtools replica`` (a model of one vLLM replica, for benchmarks and by hand)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from slo_operator.cli import InputError
from slo_runtime import contract as c
from slo_runtime.cli import serve_app


@click.command()
@click.option("--duration", type=click.FloatRange(min=1), metavar="SECONDS",
              help="Wall seconds of replay (default: the whole trace at --speed).")
@click.option("--trace", metavar="NAME",
              help="Replay this trace against every service (azure-conv, azure-code; "
                   "default: each tenant's own).")
@click.option("--speed", type=click.FloatRange(min=0.1),
              help="Time compression: trace seconds per wall second (default: docs/demo.md).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Results folder (default: ./_out/demo-<timestamp>).")
@click.option("--keep", is_flag=True,
              help="Leave the cluster up at the end, print its KUBECONFIG, wait for Ctrl-C.")
def demo(duration: float | None, trace: str | None, speed: float | None, out: Path | None,
         keep: bool) -> None:
    """Two tenants kept inside their SLOs on a local cluster (no GPU needed)."""
    from slo_devtools.demo import entry

    entry.main(duration=duration, trace=trace, speed=speed, out=out, keep=keep)


# Options that describe your own traffic: only with --trace-file or --rate-file.
TRAFFIC_OPTIONS = ("rate_scale", "objectives", "gpu", "model", "max_replicas", "max_model_len",
                   "time_unit", "rate_interval", "cv", "lengths")


@click.command()
@click.option("--trace", "traces", multiple=True, default=("azure-code,azure-conv",),
              show_default=True,
              help="Workload: azure-code,azure-conv | servegen-day | ramp | long-context | "
                   "tight-itl (repeatable).")
@click.option("--fleet", "fleets", multiple=True,
              help="Fleet the replicas really are, whatever the operator believes: x1.0 | "
                   "x0.7 | x1.3 | ctx-x2 (repeatable; default: x1.0 for every target set "
                   "and the mismatched ones for strict targets; with --trace-file or "
                   "--rate-file, x1.0 only).")
@click.option("--targets", type=click.Choice(["strict", "loose", "both"]), default="both",
              show_default=True, help="Objective set(s) to judge windows by.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-report"), show_default=True, help="Report directory.")
@click.option("--seed", type=int, default=0, show_default=True, help="Trace seed.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes (one per trace and target set; results do not change).")
@click.option("--scenario", type=click.Choice(["slo", "mixed-fleet", "scale-to-zero"]),
              default="slo", show_default=True,
              help="slo: the traces on one GPU pool; mixed-fleet: every policy on GPU pools "
                   "of limited size and price (its own compressed ramp; --trace ignored), "
                   "cost and placement per policy; scale-to-zero: 50 services, most idle "
                   "most of the hour, slo-operator with and without scale to zero "
                   "(--trace ignored; writes OUT/scale-to-zero.md).")
@click.option("--trace-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              metavar="FILE",
              help="Your traffic instead of --trace: CSV or JSONL, one request a row (arrival "
                   "time, prompt tokens, output tokens, optional tenant); docs/benchmark.md.")
@click.option("--rate-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              metavar="FILE",
              help="Your aggregate request rate instead of --trace: CSV or JSONL, start time "
                   "or interval index and rate (req/s) or count per row.")
@click.option("--rate-scale", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Multiply the file's request rate by this.")
@click.option("--objectives", metavar="E2E_MS,TTFT_MS,ITL_MS",
              help="P99 end-to-end, P95 first-token and P99 inter-token targets in whole ms, e.g. "
                   "20000,3000,100 (default: the chat objectives of --targets).")
@click.option("--gpu", metavar="PRODUCT",
              help="GPU of every replica, a product of the operator's catalogue "
                   "(e.g. 'NVIDIA H100 80GB HBM3', A100-80GB, L4; default: NVIDIA H200).")
@click.option("--model", metavar="NAME",
              help="Model of a shipped profile: llama-3.1-8b (default) or llama-3.1-70b.")
@click.option("--max-replicas", type=click.IntRange(min=1),
              help="Upper bound on replicas per service, for every policy (default 16).")
@click.option("--max-model-len", type=click.IntRange(min=16), metavar="TOKENS",
              help="Longest request (prompt + output) a replica accepts (default: the "
                   "model's context, 131072); longer ones are dropped and counted.")
@click.option("--time-unit", type=click.Choice(["s", "ms"]), default="s", show_default=True,
              help="Unit of numeric times in the file (a column named *_ms is in ms anyway).")
@click.option("--rate-interval", type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS",
              help="--rate-file: length of an interval given by index (default 60), or of the "
                   "last one given by start time (default: the median spacing).")
@click.option("--cv", type=click.FloatRange(min=0, min_open=True),
              help="--rate-file: coefficient of variation of inter-arrival times (Gamma "
                   "renewal; 1 is Poisson; default 1.2, ServeGen's production median).")
@click.option("--lengths", metavar="TRACE",
              help="--rate-file: shipped trace whose (prompt, output) pairs are drawn: "
                   "azure-conv (default) or azure-code.")
def bench(traces: tuple[str, ...], fleets: tuple[str, ...], targets: str, out: Path, seed: int,
          jobs: int, scenario: str, trace_file: Path | None, rate_file: Path | None,
          rate_scale: float,
          objectives: str | None, gpu: str | None, model: str | None,
          max_replicas: int | None, max_model_len: int | None, time_unit: str,
          rate_interval: float | None, cv: float | None, lengths: str | None) -> None:
    """Replay traces through simulated vLLM replicas under every autoscaler; write a report.

    With --trace-file or --rate-file, your own traffic: what slo-operator and the other
    autoscalers would do with it, before installing anything."""
    from slo_devtools.sim.command import run as run_bench
    from slo_devtools.sim.command import run_fleet, run_scale_to_zero

    ctx = click.get_current_context()

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT

    sets = ["strict", "loose"] if targets == "both" else [targets]
    try:
        if trace_file is not None or rate_file is not None:
            path = _bench_traffic(given, sets, out, seed, jobs, scenario, trace_file, rate_file,
                                  rate_scale, objectives, gpu, model, max_replicas,
                                  max_model_len, time_unit, rate_interval, cv, lengths,
                                  list(fleets))
        else:
            extra = [n for n in TRAFFIC_OPTIONS if given(n)]
            if extra:
                opt = "--" + extra[0].replace("_", "-")
                raise ValueError(f"{opt}: only with --trace-file or --rate-file")
            if scenario == "mixed-fleet":
                path = run_fleet(sets, out, seed)
            elif scenario == "scale-to-zero":
                path = run_scale_to_zero(sets, out, seed)
            else:
                path = run_bench(list(traces), sets, out, seed, jobs, list(fleets) or None)
    except ValueError as err:
        raise InputError(str(err)) from err
    click.echo(f"Wrote {path}")


def _bench_traffic(given: Callable[[str], bool], sets: list[str], out: Path, seed: int,
                   jobs: int, scenario: str, trace_file: Path | None, rate_file: Path | None,
                   rate_scale: float, objectives: str | None, gpu: str | None,
                   model: str | None, max_replicas: int | None, max_model_len: int | None,
                   time_unit: str, rate_interval: float | None, cv: float | None,
                   lengths: str | None, fleets: list[str]) -> Path:
    """``bench --trace-file/--rate-file``: check the options, then run and report."""
    from slo_devtools.sim.command import run_traffic
    from slo_devtools.sim.user_trace import TrafficSpec, parse_objectives

    if trace_file is not None and rate_file is not None:
        raise ValueError("--rate-file: give --trace-file or --rate-file, not both")
    if given("traces"):
        raise ValueError("--trace: give --trace or --trace-file/--rate-file, not both")
    if scenario != "slo":
        raise ValueError(f"--scenario: {scenario} runs its own workload, not a --trace-file "
                         "or --rate-file")
    if trace_file is not None:
        for name in ("rate_interval", "cv", "lengths"):
            if given(name):
                raise ValueError(f"--{name.replace('_', '-')}: only with --rate-file (a trace "
                                 "file gives every arrival and length)")
    if objectives is not None and given("targets"):
        raise ValueError("--targets: --objectives gives the targets to judge by; give one or "
                         "the other")
    obj = parse_objectives(objectives) if objectives is not None else None
    given_values: dict[str, Any] = {"model": model, "gpu": gpu, "max_replicas": max_replicas,
                                    "cv": cv, "lengths": lengths}
    spec = replace(TrafficSpec(trace_file=trace_file, rate_file=rate_file,
                               rate_scale=rate_scale, max_model_len=max_model_len,
                               time_unit=time_unit, rate_interval=rate_interval, seed=seed),
                   **{k: v for k, v in given_values.items() if v is not None})
    return run_traffic(spec, obj, sets, out, jobs,
                       warn=lambda m: click.echo(f"warning: {m}", err=True), fleets=fleets)


@click.command()
@click.option("--host", default=c.VLLM_HOST, show_default=True)
@click.option("--port", type=int, default=c.VLLM_PORT, show_default=True)
@click.option("--served-model-name", default="model", show_default=True)
@click.option("--max-num-seqs", type=int, default=256, show_default=True)
@click.option("--max-num-batched-tokens", type=int, default=8192, show_default=True)
@click.option("--kv-capacity-tokens", type=int, default=None,
              help="KV-cache size (default: from the profile, else 1000000).")
@click.option("--profile", "profile_file", default=None,
              help="Step times from a node profile JSON (the shared step model).")
@click.option("--precision", "--mode", "precision", default="bf16", show_default=True,
              type=click.Choice(["bf16", "fp16", "fp8"]))
@click.option("--kv-cache-dtype", default="auto", show_default=True)
@click.option("--cold-start", type=float, default=0.0, show_default=True,
              help="Seconds of 503 after start-up (weights loading).")
@click.option("--speed", type=float, default=1.0, show_default=True,
              help="Divide every step time by this (time compression).")
@click.option("--base-ms", type=float, default=None, help="Linear model: step at batch 1.")
@click.option("--per-seq-ms", type=float, default=None, help="Linear model: per sequence.")
@click.option("--prefill-ms-per-token", type=float, default=None)
@click.option("--default-max-tokens", type=int, default=16, show_default=True)
def replica(host: str, port: int, served_model_name: str, max_num_seqs: int,
            max_num_batched_tokens: int, kv_capacity_tokens: int | None,
            profile_file: str | None, precision: str, kv_cache_dtype: str, cold_start: float,
            speed: float, base_ms: float | None, per_seq_ms: float | None,
            prefill_ms_per_token: float | None, default_max_tokens: int) -> None:
    """Run a model of one vLLM replica (OpenAI API + vLLM metrics) without a GPU."""
    from slo_devtools.replica.server import Replica, load_steps
    from slo_runtime.stepmodel import StepModel

    if speed <= 0:
        raise click.BadParameter("must be positive", param_hint="--speed")
    steps = load_steps(profile_file, precision, kv_cache_dtype=kv_cache_dtype, speed=speed,
                       base_ms=base_ms, per_seq_ms=per_seq_ms,
                       prefill_ms_per_token=prefill_ms_per_token)
    if kv_capacity_tokens is None:
        kv_capacity_tokens = steps.kv_capacity_tokens if isinstance(steps, StepModel) \
            else 1_000_000
    serve_app(lambda: Replica(served_model_name, steps, max_num_seqs, kv_capacity_tokens,
                           default_max_tokens, max_num_batched_tokens=max_num_batched_tokens,
                           cold_start_s=cold_start, kv_cache_dtype=kv_cache_dtype).app,
           host, port)



@click.command()
@click.option("-n", "--services", "ns", type=click.IntRange(min=1), multiple=True,
              default=(10, 100, 1000), show_default=True,
              help="Numbers of InferenceServices to measure (repeatable; a fresh cluster each).")
@click.option("--interval", type=click.FloatRange(min=0.5), default=5.0, show_default=True,
              help="The operator's seconds between periodic passes.")
@click.option("--workers", type=click.IntRange(min=1), default=8, show_default=True,
              help="The operator's --workers.")
@click.option("--passes", type=click.IntRange(min=2), default=5, show_default=True,
              help="Steady-state passes counted per N.")
@click.option("--cold-timeout", type=click.FloatRange(min=10), default=900.0,
              show_default=True, help="Seconds allowed for all services to be reconciled.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Results folder (default: ./_out/scale-<timestamp>).")
def scale(ns: tuple[int, ...], interval: float, workers: int, passes: int,
          cold_timeout: float, out: Path | None) -> None:
    """N InferenceServices on the local dev cluster: what one control cycle costs."""
    import time

    from slo_devtools.scale.benchmark import run as run_scale

    out = out or Path("_out") / f"scale-{time.strftime('%Y%m%d-%H%M%S')}"
    run_scale(sorted(set(ns)), interval=interval, workers=workers, passes=passes, out=out,
              cold_timeout=cold_timeout)
    click.echo(f"Wrote {out / 'scale.json'} and {out / 'scale.md'}")


@click.group()
def main() -> None:
    """Development tools of slo-operator (the demo and bench run as slo-operator commands)."""


main.add_command(replica)
main.add_command(demo)
main.add_command(bench)
main.add_command(scale)

if __name__ == "__main__":  # pragma: no cover
    main(prog_name=os.path.basename(sys.argv[0]))
