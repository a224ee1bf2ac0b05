"""A roofline of one training step (Williams et al. 2009): the arithmetic intensity of
each op class of the step on one device, against the device's ridge point peak / bandwidth.

An op class whose FLOPs per byte of memory traffic are below the ridge is memory-bound: its time
is bytes / bandwidth, whatever the peak. Counts are per device for one micro-batch of b sequences
of s tokens through the device's L/pp layers with every matmul split tp ways (training = forward
+ backward ≈ 3 × the forward in FLOPs and in traffic), plus the micro-batch's share of the
optimizer step: one AdamW update over the device's parameters (its 1/shards when ZeRO shards the
optimizer state over dp) serves all m micro-batches of a step, so 1/m of it belongs to each. Traffic is the minimum: every operand read once from memory and every result written
once (no cache reuse across ops, none lost to spills), c bytes per activation and weight element
(bf16: 2), fp32 for the loss's softmax and the optimizer.

    matmul [m×k]·[k×n]        2mkn FLOPs, c·(mk + kn + mn) bytes
    attention (flash)          4·b·s²·h_q FLOPs (QKᵀ and AV, causal half not subtracted, as in
                               flops.py); q, k, v read and o written: c·b·s·(2h_q + 2h_kv)
    elementwise                norms ~5 FLOPs per element read+written (2c bytes), SwiGLU's
                               silu·up 6 FLOPs over 3c bytes, residual adds 1 over 3c, RoPE 3 over 2c
    loss                       softmax over b·s·V fp32 logits: ~5 FLOPs over 8 bytes per logit
    AdamW                      ~12 FLOPs per fp32 parameter over 28 bytes (parameter, m, v read
                               and written, gradient read), over shards · m
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import resolve_ffn_hidden
from tokenmill.scaling.flops import param_count

TRAIN = 3.0  # forward + backward ≈ 3 × forward, FLOPs and traffic


@dataclass(frozen=True)
class OpClass:
    """One class of a training step's ops on one device."""

    name: str
    flops: float
    bytes: float
    model_flops: bool = True  # counted by MFU (matmuls, attention), not elementwise or optimizer work

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    def seconds(self, peak_flops: float, bandwidth: float) -> float:
        """Roofline time: FLOPs at min(peak, intensity · bandwidth)."""
        return self.flops / min(peak_flops, self.intensity * bandwidth)

    def bound(self, peak_flops: float, bandwidth: float) -> str:
        return "compute" if self.intensity >= peak_flops / bandwidth else "memory"


def _matmul(m: float, k: float, n: float, c: float) -> tuple[float, float]:
    return 2 * m * k * n, c * (m * k + k * n + m * n)


def op_classes(
    cfg: ModelConfig,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    pp: int = 1,
    dtype_bytes: int = 2,
    last_stage: bool = True,
    micro_batches: int = 1,
    optimizer_shards: int = 1,
) -> list[OpClass]:
    """The op classes of one micro-batch's forward + backward on one device (the last pipeline
    stage, which has the head, by default), and its 1/micro_batches share of the optimizer step over
    that device's parameters, 1/optimizer_shards of them under ZeRO."""
    assert cfg.vocab_size is not None
    c, b, s = float(dtype_bytes), micro_batch, seq_len
    m = float(b * s)
    hd = cfg.d_model // cfg.n_heads
    hq, hkv = cfg.n_heads * hd / tp, (cfg.n_kv_heads or cfg.n_heads) * hd / tp
    F, d, V = resolve_ffn_hidden(cfg) / tp, cfg.d_model, cfg.vocab_size
    layers = cfg.n_layers / pp
    swiglu = cfg.ffn == "swiglu"

    proj = [_matmul(m, d, hq, c), _matmul(m, d, hkv, c), _matmul(m, d, hkv, c), _matmul(m, hq, d, c)]
    ffn = [_matmul(m, d, F, c)] * (2 if swiglu else 1) + [_matmul(m, F, d, c)]
    attn_flops, attn_bytes = 4.0 * b * s * s * hq, c * b * s * (2 * hq + 2 * hkv)
    elem_flops = 2 * 5 * m * d + (6 if swiglu else 8) * m * F + 2 * m * d + 3 * m * (hq + hkv)
    elem_bytes = 2 * 2 * c * m * d + 3 * c * m * F + 2 * 3 * c * m * d + 2 * c * m * (hq + hkv)

    def per_layers(pairs: list[tuple[float, float]]) -> tuple[float, float]:
        return (TRAIN * layers * sum(f for f, _ in pairs), TRAIN * layers * sum(x for _, x in pairs))

    out = [
        OpClass("attention projections (q, k, v, o)", *per_layers(proj)),
        OpClass("FFN matmuls", *per_layers(ffn)),
        OpClass("attention scores (flash)", TRAIN * layers * attn_flops, TRAIN * layers * attn_bytes),
        OpClass(
            "norms, activation, residuals, RoPE", TRAIN * layers * elem_flops, TRAIN * layers * elem_bytes, model_flops=False
        ),
    ]
    if last_stage:
        hf, hb = _matmul(m, d, V / tp, c)
        out.append(OpClass("lm head matmul", TRAIN * hf, TRAIN * hb))
        out.append(
            OpClass("loss (softmax over the vocabulary)", TRAIN * 5 * m * V / tp, TRAIN * 8 * m * V / tp, model_flops=False)
        )
    n_device = param_count(cfg)["total"] / (tp * pp * optimizer_shards) / micro_batches
    out.append(OpClass("optimizer (AdamW, fp32; per micro-batch)", 12 * n_device, 28 * n_device, model_flops=False))
    return out


@dataclass(frozen=True)
class RooflineRow:
    name: str
    flops: float
    bytes: float
    model_flops: bool
    intensity: float
    bound: str
    seconds: float
    share: float  # of the step's roofline time


def roofline(classes: list[OpClass], peak_flops: float, bandwidth: float) -> list[RooflineRow]:
    """One row per op class, with its bound, its roofline time and its share of the step's."""
    times = [oc.seconds(peak_flops, bandwidth) for oc in classes]
    total = sum(times)
    return [
        RooflineRow(oc.name, oc.flops, oc.bytes, oc.model_flops, oc.intensity, oc.bound(peak_flops, bandwidth), t, t / total)
        for oc, t in zip(classes, times)
    ]


def roofline_summary(rows: list[RooflineRow], peak_flops: float, bandwidth: float) -> dict[str, float]:
    """Ridge point, the step's roofline time and the MFU ceiling it implies (model FLOPs at peak
    over the roofline time: what the memory-bound classes cost even with perfect kernels)."""
    flops = sum(r.flops for r in rows if r.model_flops)
    seconds = sum(r.seconds for r in rows)
    return {
        "ridge_flops_per_byte": peak_flops / bandwidth,
        "step_seconds": seconds,
        "mfu_ceiling": flops / peak_flops / seconds if seconds else 0.0,
    }


def as_dicts(rows: list[RooflineRow]) -> list[dict[str, float | str]]:
    return [asdict(r) for r in rows]
