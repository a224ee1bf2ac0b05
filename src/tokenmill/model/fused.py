"""The fused projections' weight layouts, and the conversions from and to separate matrices.

An attention block computes q, k and v with one matmul (`self_attn.qkv_proj`) and a SwiGLU FFN its
gate and up with one (`mlp.gate_up_proj`): one GEMM with a wider output instead of three (two),
reading the block's input once. The reduction dimension (d_model) is unchanged, so each output
element is the same dot product as before.

Layouts, chosen so that a tensor-parallel column split (train/tensor_parallel.py: rank r takes the
r-th of tp equal row blocks) hands every rank whole heads of q, k and v, and matching gate and up
columns, whatever tp is (any tp dividing n_kv_heads and the FFN hidden size), with no layout that
depends on tp:
- qkv_proj.weight [(n_heads + 2·n_kv_heads)·hd, d] is grouped by key/value head: for kv head g,
  the rep = n_heads / n_kv_heads query heads that use it (g·rep .. g·rep+rep-1), then k_g, then v_g
  (Megatron's grouped layout). Plain multi-head attention is the case rep = 1: [q_h, k_h, v_h] per head.
- gate_up_proj.weight [2·hidden, d] interleaves rows: gate row j then up row j.

Checkpoints and HF exports keep or take the separate matrices under HF Llama's names
(q_proj/k_proj/v_proj, gate_proj/up_proj): `fuse_tensors` converts such a state dict to this
layout (old checkpoints load), `split_tensors` converts back (the HF export).
"""

from __future__ import annotations

import torch

from tokenmill.model.config import ModelConfig

QKV = "self_attn.qkv_proj.weight"
SEPARATE_QKV = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
# suffixes, not "mlp."-anchored: an MoE block's experts are FFNs too ("mlp.experts.3.gate_up_proj.weight")
GATE_UP = "gate_up_proj.weight"
SEPARATE_GATE_UP = ("gate_proj.weight", "up_proj.weight")


def pack_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dim: int) -> torch.Tensor:
    """q [H·hd, d], k and v [KV·hd, d] -> the grouped qkv weight [(H + 2·KV)·hd, d]."""
    d = q.shape[-1]
    groups = k.shape[0] // head_dim
    parts = (q.reshape(groups, -1, d), k.reshape(groups, head_dim, d), v.reshape(groups, head_dim, d))
    return torch.cat(parts, dim=1).reshape(-1, d)


def unpack_qkv(w: torch.Tensor, n_heads: int, n_kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The grouped qkv weight -> (q [H·hd, d], k [KV·hd, d], v [KV·hd, d]), contiguous."""
    rep, d = n_heads // n_kv_heads, w.shape[-1]
    g = w.reshape(n_kv_heads, rep + 2, head_dim, d)
    return (
        g[:, :rep].reshape(-1, d).contiguous(),
        g[:, rep].reshape(-1, d).contiguous(),
        g[:, rep + 1].reshape(-1, d).contiguous(),
    )


def pack_gate_up(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [hidden, d] -> the interleaved gate_up weight [2·hidden, d]."""
    return torch.stack((gate, up), dim=1).reshape(-1, gate.shape[-1])


def unpack_gate_up(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The interleaved gate_up weight -> (gate [hidden, d], up [hidden, d]), contiguous."""
    pairs = w.reshape(-1, 2, w.shape[-1])
    return pairs[:, 0].contiguous(), pairs[:, 1].contiguous()


def _prefixes(tensors: dict[str, torch.Tensor], suffix: str) -> list[str]:
    return [name[: -len(suffix)] for name in tensors if name.endswith(suffix)]


def _heads(cfg: ModelConfig) -> tuple[int, int, int]:
    return cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, cfg.d_model // cfg.n_heads


def fuse_tensors(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A state dict with separate q/k/v and gate/up matrices (an old checkpoint, an HF import) in
    the fused layout; other tensors pass through. A state dict already fused comes back unchanged."""
    head_dim = _heads(cfg)[2]
    out = dict(tensors)
    for p in _prefixes(out, SEPARATE_QKV[0]):
        names = [p + s for s in SEPARATE_QKV]
        if all(n in out for n in names):
            q, k, v = (out.pop(n) for n in names)
            out[p + QKV] = pack_qkv(q, k, v, head_dim)
    for p in _prefixes(out, SEPARATE_GATE_UP[0]):
        names = [p + s for s in SEPARATE_GATE_UP]
        if all(n in out for n in names):
            gate, up = (out.pop(n) for n in names)
            out[p + GATE_UP] = pack_gate_up(gate, up)
    return out


def split_tensors(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The inverse of `fuse_tensors`: fused weights back to separate q/k/v and gate/up matrices."""
    n_heads, n_kv_heads, head_dim = _heads(cfg)
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith(QKV):
            p = name[: -len(QKV)]
            out.update(zip((p + s for s in SEPARATE_QKV), unpack_qkv(t, n_heads, n_kv_heads, head_dim)))
        elif name.endswith(GATE_UP):
            p = name[: -len(GATE_UP)]
            out.update(zip((p + s for s in SEPARATE_GATE_UP), unpack_gate_up(t)))
        else:
            out[name] = t
    return out
