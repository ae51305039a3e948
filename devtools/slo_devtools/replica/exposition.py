"""vLLM 0.32.0's metric catalogue: every ``vllm:`` family with its type, labels and buckets.

Names and buckets come from :mod:`slo_runtime.contract`; a test compares the exposition
with the capture in ``tests/fixtures/vllm`` family by family.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from slo_runtime import contract as vc

CACHE_CONFIG_LABELS = [
    "_block_size_resolved", "block_size", "cache_dtype", "cache_hit_alignment_tokens",
    "effective_attention_block_size", "enable_mamba_shared_prefix_checkpoint",
    "enable_prefix_caching", "engine", "gpu_memory_utilization", "hash_block_size",
    "is_attention_free", "kv_cache_dtype_skip_layers", "kv_cache_layout",
    "kv_cache_max_concurrency", "kv_cache_memory_bytes", "kv_cache_size_tokens",
    "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill",
    "mamba_block_size", "mamba_cache_dtype", "mamba_cache_mode", "mamba_page_size_padded",
    "mamba_ssm_cache_dtype", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit",
    "replayssm_buffer_len", "skip_page_size_padded", "sliding_window", "swa_bounded_replay",
    "use_kda_recoverssm", "use_replayssm", "user_specified_block_size",
]
EM = list(vc.METRIC_LABELS)


class VllmMetrics:
    """vLLM's ``vllm:`` families on a private registry (several replicas per process)."""

    def __init__(self, model_name: str, engine: str = "0", block_size: int = 16,
                 kv_capacity_tokens: int = 0, max_num_seqs: int = 0,
                 cache_dtype: str = "auto", max_model_len: int = 131072):
        self.registry = reg = CollectorRegistry()
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        lv = {"engine": engine, "model_name": model_name}

        def c(name: str, doc: str, extra: list[str] | None = None) -> Counter:
            return Counter(name, doc, EM + (extra or []), registry=reg)

        def g(name: str, doc: str, extra: list[str] | None = None) -> Gauge:
            return Gauge(name, doc, EM + (extra or []), registry=reg)

        def h(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, EM, buckets=list(buckets), registry=reg).labels(**lv)

        for n in ("estimated_flops_per_gpu", "estimated_read_bytes_per_gpu",
                  "estimated_write_bytes_per_gpu"):
            c(f"vllm:{n}", f"Estimated {n.replace('_', ' ')}.").labels(**lv)
        self.running = g(vc.NUM_REQUESTS_RUNNING, "Requests in model execution batches."
                         ).labels(**lv)
        self.waiting = g(vc.NUM_REQUESTS_WAITING, "Requests waiting to be processed."
                         ).labels(**lv)
        wbr = g("vllm:num_requests_waiting_by_reason", "Waiting requests by reason.",
                ["reason"])
        self.waiting_capacity = wbr.labels(**lv, reason="capacity")
        wbr.labels(**lv, reason="deferred")
        sleep = g("vllm:engine_sleep_state", "Engine sleep state.", ["sleep_state"])
        for s, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep.labels(**lv, sleep_state=s).set(v)
        self.kv_usage = g(vc.KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent."
                          ).labels(**lv)
        for n in ("prefix_cache_queries", "prefix_cache_hits", "external_prefix_cache_queries",
                  "external_prefix_cache_hits", "mm_cache_queries", "mm_cache_hits"):
            c(f"vllm:{n}", f"{n.replace('_', ' ')} (tokens).").labels(**lv)
        self.preemptions = c(vc.NUM_PREEMPTIONS, "Cumulative preemptions.").labels(**lv)
        self.prompt_tokens = c(vc.PROMPT_TOKENS, "Prefill tokens processed.").labels(**lv)
        pbs = c("vllm:prompt_tokens_by_source", "Prompt tokens by source.", ["source"])
        self.prompt_tokens_local = pbs.labels(**lv, source="local_compute")
        for s in ("local_cache_hit", "external_kv_transfer"):
            pbs.labels(**lv, source=s)
        c("vllm:prompt_tokens_cached", "Cached prompt tokens.").labels(**lv)
        pcs = c("vllm:prompt_tokens_cached_by_source", "Cached prompt tokens by source.",
                ["source"])
        for s in ("device", "host", "p2p", "disk", "external_unspecified"):
            pcs.labels(**lv, source=s)
        self.generation_tokens = c(vc.GENERATION_TOKENS, "Generation tokens processed."
                                   ).labels(**lv)
        succ = c(vc.REQUEST_SUCCESS, "Successfully processed requests.",
                 ["finished_reason"])
        self.success = {r: succ.labels(**lv, finished_reason=r) for r in vc.FINISHED_REASONS}
        rej = Counter("vllm:admission_rejections", "Requests rejected at admission.",
                      ["model_name", "reason"], registry=reg)
        for r in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rej.labels(model_name=model_name, reason=r)
        # Per-request token counts on vLLM's 1-2-5 boundaries up to the model's length.
        tokens = vc.tokens_buckets(max_model_len)
        self.req_prompt_tokens = h("vllm:request_prompt_tokens",
                                   "Prefill tokens per request.", tokens)
        self.req_gen_tokens = h(vc.REQUEST_GENERATION_TOKENS,
                                "Generation tokens per request.", tokens)
        self.iteration_tokens = h("vllm:iteration_tokens_total", "Tokens per engine step.",
                                  vc.ITERATION_TOKENS_BUCKETS)
        self.max_gen_tokens = h("vllm:request_max_num_generation_tokens",
                                "Maximum generation tokens requested.", tokens)
        self.params_n = h("vllm:request_params_n", "The n request parameter.",
                          vc.PARAMS_N_BUCKETS)
        self.params_max_tokens = h("vllm:request_params_max_tokens",
                                   "The max_tokens request parameter.", tokens)
        self.ttft = h(vc.TTFT, "Time to first token.",
                      vc.TTFT_BUCKETS)
        self.itl = h(vc.INTER_TOKEN_LATENCY, "Inter-token latency.", vc.INTER_TOKEN_BUCKETS)
        self.tpot = h(vc.TIME_PER_OUTPUT_TOKEN,
                      "Time per output token per request.", vc.INTER_TOKEN_BUCKETS)
        self.e2e = h(vc.E2E_LATENCY, "End-to-end request latency.",
                     vc.REQUEST_LATENCY_BUCKETS)
        self.queue_time = h(vc.QUEUE_TIME, "Time spent waiting.",
                            vc.REQUEST_LATENCY_BUCKETS)
        self.inference_time = h("vllm:request_inference_time_seconds",
                                "Time spent running.", vc.REQUEST_LATENCY_BUCKETS)
        self.prefill_time = h(vc.PREFILL_TIME, "Time in prefill.",
                              vc.REQUEST_LATENCY_BUCKETS)
        self.decode_time = h(vc.DECODE_TIME, "Time in decode.",
                             vc.REQUEST_LATENCY_BUCKETS)
        self.req_preemptions = h("vllm:request_num_preemptions",
                                 "Preemptions per request.", vc.PREEMPTIONS_BUCKETS)
        self.prefill_kv_computed = h("vllm:request_prefill_kv_computed_tokens",
                                     "Prefill tokens computed (not cached) per request.",
                                     tokens)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
                     CACHE_CONFIG_LABELS, registry=reg)
        blocks = kv_capacity_tokens // block_size if block_size else 0
        values = dict.fromkeys(CACHE_CONFIG_LABELS, "None")
        values.update({
            "_block_size_resolved": "True", "block_size": str(block_size),
            "cache_dtype": cache_dtype, "engine": engine, "enable_prefix_caching": "True",
            "gpu_memory_utilization": "0.9", "kv_cache_size_tokens": str(kv_capacity_tokens),
            "num_gpu_blocks": str(blocks), "num_cpu_blocks": "0",
            "kv_cache_max_concurrency": str(max_num_seqs), "is_attention_free": "False",
        })
        info.labels(**values).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
