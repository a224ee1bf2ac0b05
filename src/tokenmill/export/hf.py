"""Export a tokenmill checkpoint as a Hugging Face `LlamaForCausalLM` directory.

    OUT/
      config.json              LlamaConfig (model_type "llama", float32)
      model.safetensors        HF parameter names: model.embed_tokens.weight,
                               model.layers.N.self_attn.{q,k,v,o}_proj.weight,
                               model.layers.N.mlp.{gate,up,down}_proj.weight,
                               model.layers.N.{input,post_attention}_layernorm.weight,
                               model.norm.weight, lm_head.weight (only when untied)
      tokenizer.json           the run's trained tokenizer, plus a post-processor that prepends
                               <|endoftext|> (see "Document start" below)
      tokenizer_config.json    PreTrainedTokenizerFast: bos_token = eos_token = <|endoftext|>, PAD
      special_tokens_map.json
      generation_config.json
Every file gets the mode a newly created file gets under the process's umask (safetensors writes
its file 0600 whatever the umask; the weights are no more private than the config beside them).

tokenmill's module names follow HF Llama, so the weights need only the "model." prefix, except the
fused projections (qkv_proj, gate_up_proj), which are split back into HF's q/k/v and gate/up
matrices (model/fused.py).
RoPE needs no permutation: `apply_rope` rotates channel pairs (i, i + hd/2) with cos/sin repeated
over both halves ("rotate_half"), which is HF Llama's convention; the test proves it by comparing
logits. A static NTK-scaled RoPE is exported as the equivalent base (rope_theta·factor^(hd/(hd-2)));
linear scaling maps to HF's `{"rope_type": "linear"}`, YaRN to `{"rope_type": "yarn"}` with its
original length (tokenmill computes YaRN's defaults: beta_fast 32, beta_slow 1, 0.1·ln s + 1).

Models that Llama cannot represent (LayerNorm, GELU FFN, learned positions, QK-norm, sliding window,
MoE, μP) are refused with one error naming every such option.

Document start. tokenmill trains on documents that each follow an `<|endoftext|>`, and scores every
prompt after one (eval/tasks.py). So the export's tokenizer prepends it: tokenizer.json gets a
`TemplateProcessing` post-processor (single "<|endoftext|> $A"), which transformers applies in
`tokenizer(text)` and `encode(text)` unless `add_special_tokens=False`, and the configs name
<|endoftext|> as the BOS token (bos_token, bos_token_id, add_bos_token: true), so that tools which
add "the BOS" themselves or pass `add_bos_token` (lm-evaluation-harness's HF model, whose
loglikelihood prefix for an empty context is bos_token_id) add the same token and no other.
`<|bos|>` (id 1) is in the vocabulary but never trained; naming it the BOS would condition every
prompt on an untrained embedding.

One difference stays: tokenmill encodes special-token strings found in text (`<|endoftext|>`) as
ordinary text, while a `PreTrainedTokenizerFast` turns them into the special id. Text without those
strings encodes to the same ids (after the prepended <|endoftext|>).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from tokenmill.model.config import ModelConfig
from tokenmill.ownership import MARKER, publish_into, read_marker, temporary_name, write_marker
from tokenmill.errors import UserError
from tokenmill.model.fused import split_tensors
from tokenmill.model.transformer import resolve_ffn_hidden
from tokenmill.model.rope import original_length
from tokenmill.tokenizer.special import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID

# The document-start token the model was trained to follow, which the export's tokenizer prepends and
# names its BOS.
DOC_START, DOC_START_ID = EOS, EOS_ID

HF_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


class ExportError(UserError):
    """The checkpoint, tokenizer or output directory cannot be exported as asked."""


def llama_incompatibilities(cfg: ModelConfig) -> list[str]:
    """Every option of `cfg` that HF Llama cannot represent, as 'model.key=value (why)'."""
    bad = []
    if cfg.norm != "rmsnorm":
        bad.append(f"model.norm={cfg.norm} (Llama uses RMSNorm)")
    if cfg.ffn != "swiglu":
        bad.append(f"model.ffn={cfg.ffn} (Llama uses a SwiGLU FFN)")
    if cfg.position != "rope":
        bad.append(f"model.position={cfg.position} (Llama uses rotary positions)")
    if cfg.qk_norm:
        bad.append("model.qk_norm=true (Llama has no QK-norm)")
    if cfg.sliding_window is not None:
        bad.append(f"model.sliding_window={cfg.sliding_window} (Llama attends to the whole context)")
    if cfg.n_experts > 0:
        bad.append(f"model.n_experts={cfg.n_experts} (Llama has a dense FFN)")
    if cfg.mup:
        bad.append("model.mup=true (Llama has no μP attention scale or output multiplier)")
    return bad


def rope_fields(cfg: ModelConfig) -> dict[str, Any]:
    """rope_theta and rope_scaling for config.json, giving the same angles as `rope_tables`."""
    head_dim = cfg.d_model // cfg.n_heads
    if cfg.rope_scaling == "ntk":  # static NTK: only the base changes (see transformer.rope_tables)
        theta = cfg.rope_theta * cfg.rope_scaling_factor ** (head_dim / (head_dim - 2))
        return {"rope_theta": float(theta), "rope_scaling": None}
    if cfg.rope_scaling == "linear":
        return {
            "rope_theta": float(cfg.rope_theta),
            "rope_scaling": {"rope_type": "linear", "factor": float(cfg.rope_scaling_factor)},
        }
    if cfg.rope_scaling == "yarn":
        original = original_length(cfg.max_seq_len, cfg.rope_scaling_factor, cfg.rope_original_max_seq_len)
        return {
            "rope_theta": float(cfg.rope_theta),
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": float(cfg.rope_scaling_factor),
                "original_max_position_embeddings": int(original),
            },
        }
    return {"rope_theta": float(cfg.rope_theta), "rope_scaling": None}


def llama_config(cfg: ModelConfig) -> dict[str, Any]:
    """config.json of the equivalent `LlamaForCausalLM`."""
    assert cfg.vocab_size is not None
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(cfg.vocab_size),
        "hidden_size": cfg.d_model,
        "intermediate_size": resolve_ffn_hidden(cfg),
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.d_model // cfg.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        **rope_fields(cfg),
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": cfg.init_std,
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": DOC_START_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
    }


def hf_state_dict(model: torch.nn.Module, tie: bool) -> dict[str, torch.Tensor]:
    """HF names -> fp32 contiguous CPU tensors; lm_head.weight left out when tied."""
    out: dict[str, torch.Tensor] = {}
    cfg: ModelConfig = getattr(model, "config")  # a Transformer's: the head counts to split qkv by
    for name, t in split_tensors(model.state_dict(), cfg).items():
        if name == "lm_head.weight":
            if tie:
                continue
            hf = name
        else:
            hf = "model." + name
        out[hf] = t.detach().to("cpu", torch.float32).contiguous().clone()
    return out


def find_run_tokenizer(checkpoint: Path) -> Path | None:
    """<run>/tokenizer/tokenizer.json for a checkpoint under <run>/checkpoints/ (or the
    checkpoints/ directory itself), searching up to three levels up."""
    p = Path(checkpoint).resolve()
    for parent in [p, *p.parents][:4]:
        cand = parent / "tokenizer" / "tokenizer.json"
        if cand.is_file():
            return cand
    return None


def _check_tokenizer(tok_path: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(tok_path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ExportError(f"{tok_path}: not a tokenizers JSON file ({exc})") from exc
    n = tok.get_vocab_size()
    if n > vocab_size:
        raise ExportError(f"{tok_path}: the tokenizer has {n} tokens, the model only {vocab_size} embeddings")
    for text, i in ((EOS, EOS_ID), (BOS, BOS_ID), (PAD, PAD_ID)):
        if tok.token_to_id(text) != i:
            raise ExportError(f"{tok_path}: special token {text} has id {tok.token_to_id(text)}, expected {i}")


def export_tokenizer_json(tokenizer_json: Path, dest: Path) -> None:
    """The run's tokenizer with a post-processor that prepends the document-start token (pairs,
    which no causal tool encodes, get it before each part). A template the file already has (an
    earlier export's, passed as --tokenizer) is replaced, so the token is never added twice; any
    other post-processor (say ByteLevel's offset trimming) runs first."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_file(str(tokenizer_json))
    start = processors.TemplateProcessing(
        single=f"{DOC_START} $A", pair=f"{DOC_START} $A {DOC_START} $B", special_tokens=[(DOC_START, DOC_START_ID)]
    )
    old = json.loads(tok.to_str()).get("post_processor")
    keep = old is not None and old.get("type") != "TemplateProcessing"
    tok.post_processor = processors.Sequence([tok.post_processor, start]) if keep else start
    tok.save(str(dest))


def tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": DOC_START,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": None,
    }


EXPORT_STAGE = "export-hf"
EXPORT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def _earlier_export(out: Path, overwrite: bool) -> set[str]:
    """The files of tokenmill's earlier export in OUT (none when OUT is new or empty); refuses, before
    any work, an OUT that holds anything else, and an earlier export unless `overwrite`."""
    if os.path.lexists(out) and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return set()
    mark = read_marker(out)
    if mark is not None and mark.get("stage") == EXPORT_STAGE:
        owned = set(mark.get("outputs", []))
    elif mark is None and _legacy_export(out):
        owned = {n for n in EXPORT_FILES if (out / n).is_file()}
    else:
        raise ExportError(
            f"{out}: not empty and not a tokenmill export (no {MARKER} marker); tokenmill never "
            "replaces files it did not write: choose a new or empty directory"
        )
    if not overwrite:
        raise ExportError(f"{out}: holds an earlier tokenmill export (pass --overwrite or --force to replace it)")
    return owned


def _legacy_export(out: Path) -> bool:
    """An export made before exports were marked: its weights carry tokenmill's step in their metadata."""
    from safetensors import safe_open

    try:
        with safe_open(str(out / "model.safetensors"), framework="pt") as fh:
            return "tokenmill_step" in (fh.metadata() or {})
    except Exception:  # safetensors raises its own error types on a missing or foreign file
        return False


def _write_export(tmp: Path, model: Any, cfg: ModelConfig, step: int, tokenizer_json: Path) -> None:
    save_file(
        hf_state_dict(model, cfg.tie_embeddings),
        str(tmp / "model.safetensors"),
        metadata={"format": "pt", "tokenmill_step": str(step)},
    )
    conf = llama_config(cfg)
    (tmp / "config.json").write_text(json.dumps(conf, indent=2) + "\n", encoding="utf-8")
    (tmp / "generation_config.json").write_text(
        json.dumps({"bos_token_id": DOC_START_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}, indent=2) + "\n",
        encoding="utf-8",
    )
    export_tokenizer_json(tokenizer_json, tmp / "tokenizer.json")
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n", encoding="utf-8")
    (tmp / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": DOC_START, "eos_token": EOS, "pad_token": PAD}, indent=2) + "\n", encoding="utf-8"
    )
    write_marker(tmp, EXPORT_STAGE, outputs=EXPORT_FILES)
    # config.json was created like any file of this process: every other file gets its mode
    mode = stat.S_IMODE((tmp / "config.json").stat().st_mode)
    for name in EXPORT_FILES:
        os.chmod(tmp / name, mode)


def export_hf(checkpoint: Path, out: Path, tokenizer_json: Path | None = None, overwrite: bool = False) -> Path:
    """Write OUT as an HF `LlamaForCausalLM` + `PreTrainedTokenizerFast` directory; return OUT.

    checkpoint: a `step_N` directory or a run's `checkpoints/` directory (newest valid one).
    tokenizer_json: default <run>/tokenizer/tokenizer.json found above the checkpoint.
    The directory is written under a temporary name and renamed, so a new OUT is either complete or
    absent. OUT may exist only empty or holding tokenmill's earlier export (replaced only with
    `overwrite`, file by file; other files there are kept).
    """
    from tokenmill.train.restore import load_model

    checkpoint, out = Path(checkpoint), Path(out)
    owned = _earlier_export(out, overwrite)
    if tokenizer_json is None:
        tokenizer_json = find_run_tokenizer(checkpoint)
        if tokenizer_json is None:
            raise ExportError(
                f"{checkpoint}: no tokenizer/tokenizer.json in the run above this checkpoint; pass --tokenizer PATH"
            )
    tokenizer_json = Path(tokenizer_json)
    if not tokenizer_json.is_file():
        raise ExportError(f"{tokenizer_json}: no tokenizer file here")

    model, step = load_model(checkpoint, "cpu")
    cfg = model.config
    bad = llama_incompatibilities(cfg)
    if bad:
        raise ExportError(
            f"{checkpoint}: the model is not Llama-compatible, so it cannot be exported as LlamaForCausalLM: " + "; ".join(bad)
        )
    assert cfg.vocab_size is not None
    _check_tokenizer(tokenizer_json, cfg.vocab_size)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(out)  # a name only this process uses: an OUT.tmp of the user's is never touched
    tmp.mkdir()
    try:
        _write_export(tmp, model, cfg, step, tokenizer_json)
        if os.path.lexists(out):  # empty, or an earlier export: replace only the files tokenmill wrote
            publish_into(tmp, out, EXPORT_STAGE, owned)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
