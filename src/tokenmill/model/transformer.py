"""A Llama-style decoder-only transformer in one readable file.

    idx ─► embed_tokens ─► [ x + Attn(RMSNorm(x)) ; x + MLP(RMSNorm(x)) ] × L ─► RMSNorm ─► lm_head

- RMSNorm pre-norm (statistics in fp32, like HF `LlamaRMSNorm`);
- rotary position embeddings, "rotate-half" convention (HF Llama), tables precomputed up to
  `max_seq_len` in fp32 and kept as non-persistent buffers (never written to checkpoints);
- grouped-query attention: `n_kv_heads` key/value heads shared by `n_heads // n_kv_heads`
  query heads each (head i uses kv head i // n_rep, as HF `repeat_kv`);
- attention through `F.scaled_dot_product_attention(is_causal=True)`, so CUDA picks the
  flash / memory-efficient kernels;
- SwiGLU MLP: down(silu(gate(x)) * up(x)), no biases anywhere;
- init: normal(0, init_std) for every matrix, residual output projections (o_proj, down_proj)
  scaled by 1/sqrt(2·n_layers) (GPT-2 / nanoGPT), norm gains 1.

Module names follow HF `LlamaForCausalLM` (embed_tokens, layers.i.self_attn.{q,k,v,o}_proj,
layers.i.mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm, norm, lm_head), so
an export only adds the "model." prefix.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.config import ModelConfig


def resolve_ffn_hidden(cfg: ModelConfig) -> int:
    """SwiGLU hidden size: the configured one, else int(8/3·d) rounded up to a multiple of 64."""
    if cfg.ffn_hidden is not None:
        return int(cfg.ffn_hidden)
    hidden = int(8 * cfg.d_model / 3)
    return 64 * math.ceil(hidden / 64)


def validate_config(cfg: ModelConfig) -> None:
    """Raise ValueError naming the field when a ModelConfig cannot build a model."""
    if cfg.vocab_size is None or cfg.vocab_size <= 0:
        raise ValueError("model.vocab_size must be set (take it from the token store) before building")
    if cfg.d_model % cfg.n_heads:
        raise ValueError(f"model.d_model={cfg.d_model} is not divisible by model.n_heads={cfg.n_heads}")
    if (cfg.d_model // cfg.n_heads) % 2:
        raise ValueError(f"head dim {cfg.d_model // cfg.n_heads} must be even for RoPE")
    n_kv = cfg.n_kv_heads or cfg.n_heads
    if n_kv <= 0 or cfg.n_heads % n_kv:
        raise ValueError(f"model.n_heads={cfg.n_heads} is not a multiple of model.n_kv_heads={n_kv}")
    if cfg.n_layers <= 0 or cfg.max_seq_len <= 0:
        raise ValueError("model.n_layers and model.max_seq_len must be positive")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [max_seq_len, head_dim] (frequencies repeated for both halves)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(max_seq_len, dtype=torch.int64).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, hd]; cos/sin: [T, hd]. Rotates channel pairs (i, i + hd/2) by angle t·f_i."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        d = cfg.d_model
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = resolve_ffn_hidden(cfg)
        self.gate_proj = nn.Linear(cfg.d_model, hidden, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    """Decoder-only LM. `forward(idx[B, T]) -> logits[B, T, vocab]`, T <= max_seq_len."""

    def __init__(self, cfg: ModelConfig, generator: torch.Generator | None = None):
        super().__init__()
        validate_config(cfg)
        self.config = cfg
        assert cfg.vocab_size is not None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        cos, sin = rope_tables(cfg.d_model // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """normal(0, init_std) everywhere; o_proj/down_proj std / sqrt(2L); norm gains 1.

        Pass a CPU `generator` for an init that does not touch (or depend on) global RNG state.
        """
        std = self.config.init_std
        resid_std = std / math.sqrt(2 * self.config.n_layers)
        for name, p in self.named_parameters():  # shared (tied) parameters are visited once
            if p.ndim == 1:
                p.fill_(1.0)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                _normal_(p, resid_std, generator)
            else:
                _normal_(p, std, generator)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.ndim != 2:
            raise ValueError(f"expected token ids of shape [B, T], got {tuple(idx.shape)}")
        T = idx.shape[1]
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds model.max_seq_len={self.config.max_seq_len}")
        x = self.embed_tokens(idx)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count, tied weights counted once.

        exclude_embeddings=True leaves out the input embedding table (vocab·d; a lookup, not a
        matmul) — Kaplan et al.'s "non-embedding" N. An untied lm_head stays in the count; a tied
        one is the embedding table and so leaves with it.
        """
        n = sum(p.numel() for p in self.parameters())  # parameters() deduplicates shared tensors
        if exclude_embeddings:
            n -= self.embed_tokens.weight.numel()
        return n


def _normal_(p: torch.Tensor, std: float, generator: torch.Generator | None) -> None:
    if generator is None or p.device == generator.device:
        nn.init.normal_(p, 0.0, std, generator=generator)
    else:  # draw on the generator's device, copy over: same numbers wherever the model lives
        p.copy_(torch.empty(p.shape, dtype=p.dtype).normal_(0.0, std, generator=generator))
