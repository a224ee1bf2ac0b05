"""Import a local Hugging Face Llama directory (config.json + safetensors) as a tokenmill model:
the inverse of export/hf.py, so a run can start from a published or an exported model.

Nothing is downloaded and nothing from the directory runs: config.json is read as JSON, the
weights as safetensors (one file, or the shards a `model.safetensors.index.json` names).
tokenmill's module names follow HF Llama, so the weights only lose their "model." prefix.
Before any tensor or the model is allocated, the config's sizes and every safetensors header are
checked against each other (export/hf_checks.py), so a config claiming sizes its weights do not
have is refused in milliseconds, by one line naming the file and the field.

Parity is checked on load: the imported Transformer's logits on a fixed token sequence are
compared with an independent forward written from HF Llama's definition (`llama_reference_logits`:
RMSNorm, rotate-half RoPE, grouped-query attention, SwiGLU, in float64 on the HF tensors
themselves). A model whose logits differ by more than `tolerance` is refused: an architecture
detail tokenmill does not reproduce shows up there rather than as a quietly worse model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open

from tokenmill.export.hf_checks import INDEX_FILE, HFImportError, check_config, check_weights, read_json_bounded
from tokenmill.model.config import ModelConfig
from tokenmill.model.fused import fuse_tensors
from tokenmill.model.rope import yarn_attention_scale, yarn_inv_freq
from tokenmill.model.transformer import Transformer

__all__ = ["INDEX_FILE", "HFImportError", "check_hf_dir", "import_hf", "llama_reference_logits", "read_hf_weights"]


def _need(conf: dict[str, Any], key: str, where: Path) -> Any:
    if key not in conf:
        raise HFImportError(f"{where}: {key} is missing")
    return conf[key]


YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}  # what model/rope.py computes


def rope_of(conf: dict[str, Any]) -> tuple[float, str, float, int | None]:
    """(theta, kind, factor, original length) from either layout: transformers ≥ 5 writes
    `rope_parameters` (theta inside), earlier versions `rope_theta` and `rope_scaling`."""
    rope = conf.get("rope_parameters") or conf.get("rope_scaling") or {}
    theta = float(rope.get("rope_theta", conf.get("rope_theta", 10000.0)))
    kind = rope.get("rope_type", rope.get("type", "default"))
    factor = float(rope.get("factor", 1.0)) if kind in ("linear", "yarn") else 1.0
    original = rope.get("original_max_position_embeddings") if kind == "yarn" else None
    return theta, kind, factor, int(original) if original is not None else None


def _yarn_variant(conf: dict[str, Any]) -> list[str]:
    """YaRN settings tokenmill does not reproduce (it computes the paper's defaults)."""
    rope = conf.get("rope_parameters") or conf.get("rope_scaling") or {}
    bad = [f"yarn {k}={rope[k]}" for k, v in YARN_DEFAULTS.items() if k in rope and rope[k] not in (None, v)]
    bad += [f"yarn {k}={rope[k]}" for k in ("mscale", "mscale_all_dim", "attention_factor") if rope.get(k) is not None]
    return bad


def model_config_from_hf(conf: dict[str, Any], where: Path) -> ModelConfig:
    """The tokenmill ModelConfig of an HF `LlamaForCausalLM` config.json; anything tokenmill
    would compute differently (biases, another activation, dynamic RoPE) is refused by name."""
    if conf.get("model_type") != "llama":
        raise HFImportError(f"{where}: model_type {conf.get('model_type')!r}; tokenmill imports Llama models")
    bad = []
    if conf.get("hidden_act", "silu") != "silu":
        bad.append(f"hidden_act={conf['hidden_act']}")
    for key in ("attention_bias", "mlp_bias"):
        if conf.get(key):
            bad.append(f"{key}=true")
    d, heads = int(_need(conf, "hidden_size", where)), int(_need(conf, "num_attention_heads", where))
    if conf.get("head_dim") not in (None, d // heads) or d % heads:
        bad.append(f"head_dim={conf.get('head_dim')} (tokenmill uses hidden_size / num_attention_heads = {d // heads})")
    theta, kind, factor, original = rope_of(conf)
    if kind not in ("default", "linear", "yarn"):
        bad.append(f"rope type {kind!r} (tokenmill reproduces the default, linear and yarn scaling)")
    if kind == "yarn":
        bad += _yarn_variant(conf)
    if conf.get("pretraining_tp", 1) != 1:
        bad.append(f"pretraining_tp={conf['pretraining_tp']}")
    if bad:
        raise HFImportError(f"{where}: this Llama variant differs from tokenmill's model: " + "; ".join(bad))
    return ModelConfig(
        vocab_size=int(_need(conf, "vocab_size", where)),
        d_model=d,
        n_layers=int(_need(conf, "num_hidden_layers", where)),
        n_heads=heads,
        n_kv_heads=int(conf.get("num_key_value_heads") or heads),
        ffn_hidden=int(_need(conf, "intermediate_size", where)),
        max_seq_len=int(conf.get("max_position_embeddings", 2048)),
        rope_theta=theta,
        norm_eps=float(conf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(conf.get("tie_word_embeddings", False)),
        init_std=float(conf.get("initializer_range", 0.02)),
        rope_scaling=kind if kind in ("linear", "yarn") else "none",
        rope_scaling_factor=factor,
        rope_original_max_seq_len=original,
    )


def read_hf_weights(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of model.safetensors, or of the shards its index names (fp32), once the
    headers have passed check_weights against config.json."""
    return load_checked(check_hf_dir(path)[2])


def load_checked(files: dict[Path, list[str]]) -> dict[str, torch.Tensor]:
    """The named tensors of each checked file, one at a time, as fp32."""
    out: dict[str, torch.Tensor] = {}
    for file, names in files.items():
        try:
            with safe_open(str(file), framework="pt") as fh:
                for name in names:
                    out[name] = fh.get_tensor(name).to(torch.float32)
        except (SafetensorError, OSError) as exc:  # e.g. the file changed since its header was checked
            raise HFImportError(f"{file}: cannot be read as safetensors ({exc})") from exc
    return out


def tokenmill_tensors(hf: dict[str, torch.Tensor], tie: bool, where: Path) -> dict[str, torch.Tensor]:
    """HF names -> tokenmill names; a tied head must not differ from the embedding."""
    out = {}
    for name, t in hf.items():
        if name.startswith("model."):
            out[name[len("model.") :]] = t
        elif name == "lm_head.weight":
            if tie and not torch.equal(t, hf["model.embed_tokens.weight"]):
                raise HFImportError(f"{where}: tie_word_embeddings is true but lm_head.weight differs from the embedding")
            if not tie:
                out[name] = t
        elif not name.endswith("rotary_emb.inv_freq"):  # old checkpoints store the RoPE table
            raise HFImportError(f"{where}: unexpected tensor {name!r}")
    return out


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


@torch.no_grad()
def llama_reference_logits(hf: dict[str, torch.Tensor], conf: dict[str, Any], idx: torch.Tensor) -> torch.Tensor:
    """HF Llama's forward, written from its definition, in float64 (independent of
    tokenmill's Transformer): logits [B, T, V] of idx [B, T]."""
    w = {k: v.to(torch.float64) for k, v in hf.items()}
    d, H = conf["hidden_size"], conf["num_attention_heads"]
    KV, hd, eps = conf.get("num_key_value_heads") or H, d // H, conf.get("rms_norm_eps", 1e-6)
    B, T = idx.shape
    theta, kind, factor, original = rope_of(conf)
    pos = torch.arange(T, dtype=torch.float64) / (factor if kind == "linear" else 1.0)
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    scale = 1.0
    if kind == "yarn":  # the paper's blend (checked against transformers' own in tests/model/test_rope.py)
        length = original or round(conf.get("max_position_embeddings", 2048) / factor)
        inv, scale = yarn_inv_freq(hd, theta, factor, length).to(torch.float64), yarn_attention_scale(factor)
    ang = torch.cat([torch.outer(pos, inv)] * 2, dim=-1)
    cos, sin = ang.cos() * scale, ang.sin() * scale
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][idx]
    for i in range(conf["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, d) @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        x = (
            x
            + (F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T))
            @ w[p + "mlp.down_proj.weight"].T
        )
    x = _rms(x, w["model.norm.weight"], eps)
    return x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


def check_hf_dir(path: Path) -> tuple[dict[str, Any], ModelConfig, dict[Path, list[str]]]:
    """config.json and every weight header checked against each other, nothing loaded (milliseconds):
    (the config, its ModelConfig, the tensors to load by file)."""
    conf_path = path / "config.json"
    if not conf_path.is_file():
        raise HFImportError(f"{path}: no config.json (a local Hugging Face model directory is expected)")
    conf = read_json_bounded(conf_path, "config.json")
    sizes = check_config(conf, conf_path)  # before anything is sized from it
    cfg = model_config_from_hf(conf, conf_path)
    return conf, cfg, check_weights(path, sizes)


def import_hf(path: Path | str, tolerance: float = 1e-4, check_tokens: int = 32) -> tuple[Transformer, dict[str, Any]]:
    """(tokenmill Transformer in eval mode on the CPU, what was imported and the measured parity)."""
    path = Path(path)
    conf, cfg, files = check_hf_dir(path)
    hf = load_checked(files)
    model = Transformer(cfg)
    tensors = fuse_tensors(tokenmill_tensors(hf, cfg.tie_embeddings, path), cfg)  # HF's q/k/v, gate/up: fused
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors) - ({"lm_head.weight"} if cfg.tie_embeddings else set()))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise HFImportError(f"{path}: tensors do not match a Llama of this config (missing {missing}, unexpected {unexpected})")
    for name, t in tensors.items():
        if expected[name].shape != t.shape:
            raise HFImportError(f"{path}: {name} has shape {tuple(t.shape)}, the config implies {tuple(expected[name].shape)}")
    model.load_state_dict(tensors, strict=False)
    model.eval()
    T = min(check_tokens, cfg.max_seq_len)
    idx = torch.randint(0, cfg.vocab_size or 1, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(idx).double()
    ref = llama_reference_logits(hf, conf, idx)
    diff = float((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
    if diff > tolerance:
        raise HFImportError(
            f"{path}: imported logits differ from the Llama definition by {diff:.2e} of their range "
            f"(tolerance {tolerance:g}): tokenmill does not reproduce this model"
        )
    info = {
        "from": str(path.resolve()),
        "format": "hf-llama",
        "model_config": cfg.model_dump(mode="json"),
        "parity": {"max_rel_diff": diff, "tokens": int(idx.numel())},
    }
    return model, info
