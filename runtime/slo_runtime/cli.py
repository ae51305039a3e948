"""``slo-runtime``: what runs inside a vLLM pod (probe, profile, launch, gateway)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import click

from slo_runtime import contract as c


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """In-pod runtime of slo-operator."""
    _logging(verbose)


@main.command()
@click.option("--expected-product", envvar=c.ENV_EXPECTED_GPU_PRODUCT, default=None,
              help="nvidia.com/gpu.product label value of the node.")
@click.option("--expected-cc", envvar=c.ENV_EXPECTED_COMPUTE_CAPABILITY, default=None,
              help='Compute capability the node promised, e.g. "9.0".')
@click.option("--expected-count", envvar=c.ENV_EXPECTED_GPU_COUNT, type=int, default=None)
@click.option("--output", envvar=c.ENV_PROBE_FILE, type=click.Path(dir_okay=False),
              default=None, help="Also write the result JSON here.")
@click.option("--no-torch", is_flag=True, help="Do not ask PyTorch (nvidia-smi/rocm-smi only).")
def probe(expected_product: str | None, expected_cc: str | None,
          expected_count: int | None, output: str | None, no_torch: bool) -> None:
    """Probe the pod's GPUs and compare them with the node labels (exit 3 on mismatch)."""
    from slo_runtime import probe as pr

    res = pr.compare(pr.probe(use_torch=not no_torch), expected_product, expected_cc,
                     expected_count)
    text = json.dumps(res.as_dict(), sort_keys=True)
    click.echo(text)
    if output:
        Path(output).write_text(text + "\n")
    if not res.matches:
        sys.exit(3)


@main.command()
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False),
              default=None, help="JSON list of model plans (see docs/profile-format.md).")
@click.option("--model", "models", multiple=True,
              help="Built-in shape (llama-3.1-8b, llama-3.1-70b) or path to a config.json.")
@click.option("--ctx", type=int, default=1024, show_default=True)
@click.option("--batches", default="1,8,16,32,64,128,256", show_default=True)
@click.option("--prefill-tokens", default="128,512,2048,8192", show_default=True)
@click.option("--modes", default="bf16,fp8", show_default=True)
@click.option("--device", default="cuda", show_default=True)
@click.option("--no-graphs", is_flag=True, help="Time eager steps instead of CUDA graphs.")
@click.option("--no-compile", is_flag=True, help="No torch.compile fusion (slower FP8).")
@click.option("--decode-iters", type=int, default=30, show_default=True)
@click.option("--gemm-n", type=int, default=8192, show_default=True)
@click.option("--copy-mib", type=int, default=4096, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
def profile(plan_file: str | None, models: tuple[str, ...], ctx: int, batches: str,
            prefill_tokens: str, modes: str, device: str, no_graphs: bool,
            no_compile: bool, decode_iters: int, gemm_n: int, copy_mib: int,
            out_dir: str) -> None:
    """Measure this node's GPU and write one profile JSON per model shape."""
    from slo_runtime import profile as prof

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x.strip()]

    if plan_file:
        plans = [prof.ModelPlan.from_dict(d) for d in json.loads(Path(plan_file).read_text())]
    else:
        plans = [prof.ModelPlan(shape=m, ctx=ctx, batches=ints(batches),
                                prefill_tokens=ints(prefill_tokens),
                                modes=modes.split(",")) for m in models]
    if not plans:
        raise click.UsageError("give --plan or at least one --model")
    st = prof.Settings(device=device, use_graphs=not no_graphs, compile=not no_compile,
                       decode_iters=decode_iters, gemm_n=gemm_n, copy_bytes=copy_mib * 2**20)
    for p in prof.run(plans, st, Path(out_dir)):
        click.echo(json.dumps({k: p.get(k) for k in (
            "shape", "ctx", "layers_measured", "knee_batch", "fp8_recommended")}))


@main.command()
def launch() -> None:
    """Build the final vLLM command line from SLO_ENGINE_ARGS and the probe, then exec it."""
    from slo_runtime.launch import run_launch

    try:
        run_launch(dict(os.environ))
    except ValueError as e:
        raise click.ClickException(str(e)) from e


def serve_app(app_factory, host: str, port: int) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import gc

    from slo_runtime.proxy import start_site

    async def _main() -> None:
        app = app_factory()
        runner, bound = await start_site(app, host, port)
        # Long-lived objects from start-up leave the collector's view, so full
        # collections under load scan only per-request garbage (shorter pauses).
        gc.collect()
        gc.freeze()
        logging.getLogger("slo_runtime").info("Listening on %s:%d", host, bound)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.run(_main())
    except ImportError:
        asyncio.run(_main())


@main.command()
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", type=int, default=c.GATEWAY_PORT, show_default=True)
@click.option("--upstream", envvar=c.ENV_UPSTREAM, default=f"http://{c.VLLM_HOST}:{c.VLLM_PORT}",
              show_default=True, help="vLLM's address inside the pod.")
@click.option("--limit-file", envvar=c.ENV_INFLIGHT_LIMIT_FILE, default=None,
              help="Downward-API file holding the live in-flight limit.")
@click.option("--default-limit", envvar=c.ENV_INFLIGHT_LIMIT, type=int, default=256,
              show_default=True, help="Limit until the file holds a valid one.")
@click.option("--poll-interval", type=float, default=0.5, show_default=True)
@click.option("--tenants-file", envvar=c.ENV_TENANTS_FILE, default=None,
              help="YAML/JSON tenants file (weights, API keys, unknown-tenant policy).")
@click.option("--tenant-header", default="X-Tenant", show_default=True)
@click.option("--max-body-bytes", type=int, default=4 * 2**20, show_default=True)
@click.option("--queue-timeout", type=float, default=300.0, show_default=True)
@click.option("--max-queue", type=int, default=4096, show_default=True,
              help="Waiting requests per tenant before 429.")
@click.option("--probe-file", envvar=c.ENV_PROBE_FILE, default=None)
def gateway(host: str, port: int, upstream: str, limit_file: str | None, default_limit: int,
            poll_interval: float, tenants_file: str | None, tenant_header: str,
            max_body_bytes: int, queue_timeout: float, max_queue: int,
            probe_file: str | None) -> None:
    """Run the admission gateway in front of vLLM."""
    from slo_runtime.gateway import Gateway, GatewayConfig, TenantsConfig

    cfg = GatewayConfig(upstream=upstream.rstrip("/"), default_limit=default_limit,
                        limit_file=limit_file, poll_interval_s=poll_interval,
                        max_body_bytes=max_body_bytes, tenant_header=tenant_header,
                        tenants=TenantsConfig.load(tenants_file),
                        max_queue_per_tenant=max_queue, queue_timeout_s=queue_timeout,
                        probe_file=probe_file)
    serve_app(lambda: Gateway(cfg).app, host, port)


if __name__ == "__main__":  # pragma: no cover
    main(prog_name=os.path.basename(sys.argv[0]))
