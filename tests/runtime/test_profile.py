"""Profile: shapes, the analysis, the committed H200 profiles, and the torch code on CPU."""

from __future__ import annotations

import json

import pytest

from slo_runtime import profile_math as pm
from slo_runtime.model_shape import ModelShape
from tests.runtime.rt_support import CALIBRATION, PROFILES

CALIB_8B = json.loads((CALIBRATION / "h200-llama3-8b-shape.json").read_text())
TINY_CFG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
            "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "vocab_size": 256}


# --- shapes -------------------------------------------------------------------------------
def test_builtin_8b_shape_and_its_weight_bytes() -> None:
    s = ModelShape.load("llama-3.1-8b")
    assert (s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.intermediate_size,
            s.vocab_size, s.head_dim) == (4096, 32, 32, 8, 14336, 128256, 128)
    # Llama-3.1-8B has 8.03 B parameters; the input embedding is not read per step.
    params = s.num_layers * s.layer_params() + s.lm_head_params()
    assert params + s.vocab_size * s.hidden_size == pytest.approx(8.03e9, rel=0.01)
    # Bytes streamed per step: 15 GB in BF16 (the calibration README's figure); FP8 layers
    # with a BF16 LM head: 6.98 GB + 1.05 GB.
    assert s.weight_bytes(2.0) / 1e9 == pytest.approx(15.0, rel=0.03)
    assert s.weight_bytes(1.0) / 1e9 == pytest.approx(8.03, rel=0.01)


def test_70b_shape_and_config_path(tmp_path) -> None:
    s = ModelShape.load("llama-3.1-70b")
    assert s.num_layers * s.layer_params() / 1e9 == pytest.approx(68.5, rel=0.01)
    d = tmp_path / "tiny-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_CFG))
    t = ModelShape.load(str(d / "config.json"))
    assert (t.name, t.head_dim, t.qkv_out) == ("tiny-model", 16, (4 + 2 * 2) * 16)


@pytest.mark.parametrize("cfg", [
    {**TINY_CFG, "num_local_experts": 8},
    {**TINY_CFG, "architectures": ["BertModel"]},
], ids=["mixture-of-experts", "not-a-causal-lm"])
def test_unsupported_configs_are_refused(cfg: dict) -> None:
    with pytest.raises(ValueError):
        ModelShape.from_config(cfg, "x")


# --- analysis -------------------------------------------------------------------------------
@pytest.mark.parametrize(("table", "want"), [
    (CALIB_8B["decode_ms"]["bf16"], 64),
    (CALIB_8B["decode_ms"]["fp8"], 128),
    ({1: 5.0, 8: 5.1, 64: 5.5}, 64),
    ({1: 1.0, 2: 2.0, 4: 4.0}, 1),
    ({"16": 4.0, "1": 1.0, "4": 1.1}, 4),
    ({}, None),
], ids=["calibration-bf16-bends-after-64", "calibration-fp8-bends-after-128",
        "flat-curve-knee-at-end", "linear-from-the-start", "unsorted-string-keys", "empty"])
def test_knee_batch(table: dict, want: int | None) -> None:
    assert pm.knee_batch(table) == want


def test_fp8_verdicts_need_a_win_at_every_batch_and_hardware_support() -> None:
    sp = pm.fp8_speedup({"1": 5.0, "64": 8.0}, {"1": 4.0, "64": 7.9, "128": 9.0})
    assert sp == {"1": 1.25, "64": pytest.approx(1.0127, abs=1e-4)}
    faster = pm.fp8_faster(sp)
    assert faster == {"1": True, "64": False}     # 1.3% is inside the noise margin
    assert pm.fp8_recommended(faster, True) is False
    assert pm.fp8_recommended({"1": True, "64": True}, True) is True
    assert pm.fp8_recommended({"1": True, "64": True}, False) is False
    assert pm.fp8_recommended({}, True) is False


def test_layers_that_fit_and_scaling() -> None:
    s = ModelShape.load("llama-3.1-70b")
    free = 139 * 2**30
    kv = s.kv_bytes(128, 1025, layers=1)
    bf16 = pm.layers_that_fit(s.layer_params() * 2, s.lm_head_params() * 2, kv, 80, free)
    fp8 = pm.layers_that_fit(s.layer_params() * 1, s.lm_head_params() * 2, kv, 80, free)
    assert 30 < bf16 < 80        # BF16 70B does not fit on one 141 GB card
    assert fp8 == 80
    assert pm.scale_layers(total_ms=20.5, head_ms=0.5, measured=40, full=80) == 40.5


# --- the committed H200 profiles ----------------------------------------------------------------
PROFILE_FILES = sorted(PROFILES.glob("h200-llama-*.json"))
CALIB_KEYS = {"device", "cc", "torch", "hbm_copy_GBps", "bf16_gemm_TFLOPs", "fp8_gemm_TFLOPs",
              "fp8_static_scales", "ctx", "decode_ms", "prefill_ms"}


@pytest.mark.parametrize("path", PROFILE_FILES, ids=[p.stem for p in PROFILE_FILES])
def test_committed_profile_is_consistent(path) -> None:
    p = json.loads(path.read_text())
    assert p.keys() >= CALIB_KEYS, "keys the calibration files use"
    assert p["format"] == "slo-runtime-profile/v1"
    assert p["hardware"]["product"] == "NVIDIA H200" and p["cc"] == [9, 0]
    for mode in ("bf16", "fp8"):
        d = {int(b): t for b, t in p["decode_ms"][mode].items()}
        assert all(t > 0 for t in d.values())
        assert [d[b] for b in sorted(d)] == sorted(d.values()), "step time rises with batch"
        assert p["knee_batch"][mode] == pm.knee_batch(d)
        # No step can beat streaming the weights once at the measured bandwidth.
        s = ModelShape.load(p["shape"])
        floor = s.weight_bytes(2.0 if mode == "bf16" else 1.0) / p["hbm_copy_GBps"] / 1e6
        assert min(d.values()) > floor
    assert p["fp8_faster"] == pm.fp8_faster(p["fp8_speedup"]["decode"])
    assert p["fp8_recommended"] == all(p["fp8_faster"].values())


def test_8b_decode_is_within_25_percent_of_the_calibration_floor() -> None:
    p = json.loads((PROFILES / "h200-llama-3.1-8b-ctx1024.json").read_text())
    for mode in ("bf16", "fp8"):
        for b, floor in CALIB_8B["decode_ms"][mode].items():
            assert p["decode_ms"][mode][b] == pytest.approx(floor, rel=0.25), (mode, b)


# --- the torch code, on the CPU with tiny shapes --------------------------------------------------
def test_decode_step_equals_prefill_of_the_same_sequence() -> None:
    torch = pytest.importorskip("torch")
    from slo_runtime.decoder import Decoder, new_kv_cache

    shape = ModelShape.from_config(TINY_CFG, "tiny")
    dec = Decoder.build(shape, dtype=torch.float32, seed=3)
    t = 9
    x = torch.randn(t, shape.hidden_size)
    want, kvs = dec.prefill(x, return_kv=True)
    ks, vs = new_kv_cache(shape, 1, t - 1, device="cpu", dtype=torch.float32)
    for li, (k, v) in enumerate(kvs):
        ks[li][0, :, : t - 1] = k[:, : t - 1]
        vs[li][0, :, : t - 1] = v[:, : t - 1]
    got = dec.decode(x[-1:], ks, vs, t - 1)
    assert float((got - want).norm() / want.norm()) < 1e-5
    # A wrong position (RoPE or cache offset) would not agree.
    off = dec.decode(x[-1:], ks, vs, t - 2)
    assert float((off - want).norm() / want.norm()) > 1e-2


def test_fp8_path_with_static_scales_tracks_bf16() -> None:
    torch = pytest.importorskip("torch")
    from slo_runtime.decoder import FP8, Decoder, new_kv_cache

    shape = ModelShape.from_config(TINY_CFG, "tiny")
    ref = Decoder.build(shape, dtype=torch.bfloat16, seed=5)
    q = Decoder.build(shape, dtype=torch.bfloat16, fp8=True, seed=5)
    assert all(lin.weight.dtype == FP8 for lin in q.linears())
    assert q.lm_head.weight.dtype == torch.bfloat16        # LM head stays BF16
    ks, vs = new_kv_cache(shape, 4, 16, device="cpu", dtype=torch.bfloat16)
    x = torch.randn(4, shape.hidden_size, dtype=torch.bfloat16)
    q.calibrate(x, ks, vs, 16)
    assert all(float(lin.x_scale) > 0 for lin in q.linears())
    a = q.decode(torch.randn_like(x), ks, vs, 16).float()
    b = ref.decode(torch.randn_like(x), ks, vs, 16).float()
    a2 = q.decode(x, ks, vs, 16).float()
    b2 = ref.decode(x, ks, vs, 16).float()
    err = float((a2 - b2).norm() / b2.norm())
    assert err < 0.15, err                   # E4M3 has 3 mantissa bits
    assert float((a - b).norm() / b.norm()) > err / 100   # different inputs differ


def test_profile_run_on_cpu_writes_the_documented_format(tmp_path) -> None:
    pytest.importorskip("torch")
    from slo_runtime.profile import ModelPlan, Settings, run

    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(TINY_CFG))
    plan = ModelPlan(shape=str(cfg), ctx=32, batches=[1, 2, 4], prefill_tokens=[8, 16],
                     name="cpu-tiny")
    st = Settings(device="cpu", use_graphs=False, compile=False, decode_iters=2,
                  prefill_iters=1, warmup=1, gemm_n=64, copy_bytes=2**20)
    (prof,) = run([plan], st, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "cpu-tiny.json").read_text())
    assert written == json.loads(json.dumps(prof))
    for key in ("hardware", "hbm_copy_GBps", "bf16_gemm_TFLOPs", "decode_ms", "prefill_ms",
                "knee_batch", "layers_measured", "decode_floor_ms", "fp8_recommended"):
        assert key in written, key
    modes = ["bf16", "fp8"] if written["fp8_supported"] else ["bf16"]
    for mode in modes:
        assert sorted(written["decode_ms"][mode], key=int) == ["1", "2", "4"]
        assert sorted(written["prefill_ms"][mode], key=int) == ["8", "16"]
        assert written["knee_batch"][mode] in (1, 2, 4)
    if written["fp8_supported"]:
        assert set(written["fp8_faster"]) == {"1", "2", "4"}


def test_profile_scales_a_partial_depth_run_to_the_full_model(tmp_path) -> None:
    pytest.importorskip("torch")
    import torch

    from slo_runtime.profile import ModelPlan, Settings, Timer, profile_model

    cfg = tmp_path / "deep" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({**TINY_CFG, "num_hidden_layers": 4}))
    plan = ModelPlan(shape=str(cfg), ctx=16, batches=[1], prefill_tokens=[8],
                     modes=["bf16"], layers={"bf16": 2})
    st = Settings(device="cpu", use_graphs=False, compile=False, decode_iters=2,
                  prefill_iters=1, warmup=1)
    p = profile_model(plan, st, Timer(torch.device("cpu")), fp8_supported=False)
    assert p["layers_measured"] == {"bf16": 2} and p["layers"] == 4
    raw, head = p["decode_ms_measured"]["bf16"]["1"], p["lm_head_ms"]["bf16"]["1"]
    assert p["decode_ms"]["bf16"]["1"] == pytest.approx(head + (raw - head) * 2)
    assert any("2 of 4 layers" in n for n in p["notes"])
    assert p["fp8_recommended"] is False


# --- long context: chunked prefill after cached context, long decode -------------------------
def test_chunked_prefill_computes_the_full_prefill() -> None:
    torch = pytest.importorskip("torch")
    from slo_runtime.decoder import Decoder, new_kv_cache
    from slo_runtime.profile import prefill_chunk

    shape = ModelShape.from_config(TINY_CFG, "tiny")
    dec = Decoder.build(shape, dtype=torch.float32, seed=7)
    n, chunk = 48, 16
    x = torch.randn(n, shape.hidden_size)
    want, kvs = dec.prefill(x, return_kv=True)
    ks, vs = new_kv_cache(shape, 1, n - 1, device="cpu", dtype=torch.float32)
    for start in range(0, n, chunk):
        got = prefill_chunk(dec, x[start:start + chunk], ks, vs, start)
    assert float((got - want).norm() / want.norm()) < 1e-5
    # Every chunk wrote its K/V where the full prefill has them.
    for li, (k, v) in enumerate(kvs):
        assert torch.allclose(ks[li][0, :, :n], k, atol=1e-5)
        assert torch.allclose(vs[li][0, :, :n], v, atol=1e-5)
    # A last chunk that ignored the cached context (attention from position 0) differs.
    ks0, vs0 = new_kv_cache(shape, 1, n - 1, device="cpu", dtype=torch.float32)
    alone = prefill_chunk(dec, x[n - chunk:], ks0, vs0, 0)
    assert float((alone - want).norm() / want.norm()) > 1e-2


def test_prefill_attention_merges_context_and_chunk() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    from slo_runtime.profile import prefill_attention

    q = torch.randn(1, 4, 8, 16)
    k, v = torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16)   # 32 cached, 8 in the chunk
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(8, 40),
                                          enable_gqa=True)
    assert float((prefill_attention(q, k, v) - want).norm() / want.norm()) < 1e-5
    square = F.scaled_dot_product_attention(q, k[:, :, 32:], v[:, :, 32:], is_causal=True,
                                            enable_gqa=True)
    assert torch.allclose(prefill_attention(q, k[:, :, 32:], v[:, :, 32:]), square, atol=1e-5)


@pytest.mark.parametrize(("keys", "splits"), [(37, 3), (40, 4), (5, 8), (100, 1)],
                         ids=["remainder", "even", "shorter-than-splits", "one-split"])
def test_split_kv_decode_attention_is_attention(keys: int, splits: int) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from slo_runtime.profile import decode_attention

    q = torch.randn(2, 2, 3, 16)
    kc, vc = torch.randn(3, 2, keys + 4, 16), torch.randn(3, 2, keys + 4, 16)
    k, v = kc[:2, :, :keys], vc[:2, :, :keys]       # slices of a larger cache, as in decode
    want = F.scaled_dot_product_attention(q, k, v)
    got = decode_attention(q, k, v, splits)
    assert float((got - want).norm() / want.norm()) < 1e-5


def test_kv_splits_fill_the_processors_without_short_splits() -> None:
    pytest.importorskip("torch")
    from slo_runtime.profile import MIN_KV_SPLIT, kv_splits

    assert kv_splits(parallel=8, keys=65536, processors=132) == 33
    assert kv_splits(parallel=8, keys=4 * MIN_KV_SPLIT, processors=132) == 4
    assert kv_splits(parallel=1024, keys=65536, processors=132) == 1
    assert kv_splits(parallel=4, keys=100, processors=132) == 1


def test_long_context_decode_step_equals_the_decode_step() -> None:
    torch = pytest.importorskip("torch")
    from slo_runtime.decoder import Decoder, new_kv_cache
    from slo_runtime.profile import decode_long

    shape = ModelShape.from_config(TINY_CFG, "tiny")
    dec = Decoder.build(shape, dtype=torch.float32, seed=9)
    ctx = 300
    ks, vs = new_kv_cache(shape, 3, ctx, device="cpu", dtype=torch.float32)
    x = torch.randn(2, shape.hidden_size)
    want = dec.decode(x, ks, vs, ctx)
    got = decode_long(dec, x, ks, vs, ctx)
    assert float((got - want).norm() / want.norm()) < 1e-5
    assert float((decode_long(dec, x, ks, vs, ctx - 1) - want).norm() / want.norm()) > 1e-2


def test_long_context_plan_needs_contexts_that_are_whole_chunks() -> None:
    pytest.importorskip("torch")
    from slo_runtime.profile import ModelPlan

    with pytest.raises(ValueError, match="prefill_contexts: 3000 is not a multiple of the "
                                         "prefill_chunks value 2048"):
        ModelPlan(shape="llama-3.1-8b", prefill_chunks=[2048], prefill_contexts=[0, 3000])


def test_profile_run_on_cpu_writes_the_long_context_keys(tmp_path) -> None:
    pytest.importorskip("torch")
    from slo_runtime.profile import ModelPlan, Settings, run

    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(TINY_CFG))
    plan = ModelPlan(shape=str(cfg), ctx=32, batches=[1], prefill_tokens=[8], modes=["bf16"],
                     prefill_chunks=[8, 16], prefill_contexts=[0, 16, 32],
                     decode_contexts={"64": [1, 2]}, name="cpu-long")
    st = Settings(device="cpu", use_graphs=False, compile=False, decode_iters=2,
                  prefill_iters=1, warmup=1, gemm_n=64, copy_bytes=2**20, chunk_passes=2)
    run([plan], st, tmp_path / "out")
    p = json.loads((tmp_path / "out" / "cpu-long.json").read_text())
    assert set(p["prefill_ctx_ms"]["bf16"]) == {"8", "16"}
    for chunk in ("8", "16"):
        row = p["prefill_ctx_ms"]["bf16"][chunk]
        assert set(row) == {"0", "16", "32"} and all(t > 0 for t in row.values())
        totals = p["prefill_chunked_ms"]["bf16"][chunk]
        assert set(totals) == {"16", "32"}
        assert totals["32"] > totals["16"] > 0
    # A prompt of one chunk is that chunk after no context.
    assert p["prefill_chunked_ms"]["bf16"]["16"]["16"] == p["prefill_ctx_ms"]["bf16"]["16"]["0"]
    assert set(p["decode_ctx_ms"]["bf16"]["64"]) == {"1", "2"}


def test_sequence_timer_reports_each_call() -> None:
    torch = pytest.importorskip("torch")
    from slo_runtime.profile import Timer

    calls: list[int] = []
    times = Timer(torch.device("cpu")).sequence_ms(
        [lambda: calls.append(0), lambda: calls.append(1)], passes=3)
    assert calls == [0, 1] * 3
    assert len(times) == 2 and all(t >= 0 for t in times)
