"""`export_hf`: the exported directory loads in HF transformers (local files only) and computes the
same function as the tokenmill checkpoint; its tokenizer encodes like tokenmill's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tokenmill.config import ModelConfig, TokenizerConfig
from tokenmill.export.hf import ExportError, export_hf, find_run_tokenizer
from tokenmill.model.transformer import Transformer
from tokenmill.tokenizer.bpe import load_tokenizer, train_bpe
from tokenmill.train.checkpoint import save_checkpoint

transformers = pytest.importorskip("transformers")

TEXTS = ["The quick brown fox jumps over the lazy dog. " * 3,
         "def tokenize(text):\n    return text.split()\n",
         "Numbers 2024 and 1999, naïve café, 東京 tower."] * 20
SAMPLE = "The lazy fox returns 2024 tokens: naïve café!\n  def f(x): return x"


def make_run(root: Path, **model_kw) -> tuple[Path, Transformer, Path]:
    """<root>/run with tokenizer/tokenizer.json and checkpoints/step_3 of a tiny random model."""
    run = root / "run"
    (run / "tokenizer").mkdir(parents=True)
    tok = train_bpe(TEXTS, TokenizerConfig(vocab_size=340, min_frequency=1))
    tok_path = run / "tokenizer" / "tokenizer.json"
    tok.save(str(tok_path))
    kw = dict(vocab_size=352, d_model=48, n_layers=2, n_heads=6, n_kv_heads=2, ffn_hidden=80,
              max_seq_len=64, rope_theta=500.0, norm_eps=1e-6)
    kw.update(model_kw)
    cfg = ModelConfig(**kw)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # norm gains away from 1 so a dropped or misplaced norm shows
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.uniform_(0.5, 1.5)
    ckpt = save_checkpoint(run / "checkpoints", 3, model, None,
                           {"model_config": cfg.model_dump(mode="json")})
    return run, model.eval(), ckpt


def hf_logits(out: Path, ids: torch.Tensor) -> torch.Tensor:
    hf = transformers.LlamaForCausalLM.from_pretrained(out, local_files_only=True, torch_dtype=torch.float32)
    hf.eval()
    with torch.no_grad():
        return hf(input_ids=ids).logits


@pytest.mark.parametrize("tie", [True, False])
def test_logits_match(tmp_path: Path, tie: bool) -> None:
    run, model, ckpt = make_run(tmp_path, tie_embeddings=tie)
    out = export_hf(ckpt, tmp_path / "hf", None)
    conf = json.loads((out / "config.json").read_text())
    assert conf["tie_word_embeddings"] is tie and conf["num_key_value_heads"] == 2
    assert conf["intermediate_size"] == 80 and conf["vocab_size"] == 352
    from safetensors.torch import load_file
    names = set(load_file(out / "model.safetensors"))
    assert ("lm_head.weight" in names) is (not tie)
    assert {"model.embed_tokens.weight", "model.norm.weight", "model.layers.1.self_attn.k_proj.weight",
            "model.layers.0.mlp.gate_proj.weight", "model.layers.1.post_attention_layernorm.weight"} <= names
    ids = torch.randint(0, 352, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids)
    got = hf_logits(out, ids)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn"])
def test_rope_scaling_logits_match(tmp_path: Path, scaling: str) -> None:
    run, model, ckpt = make_run(tmp_path, rope_scaling=scaling, rope_scaling_factor=4.0)
    out = export_hf(run / "checkpoints", tmp_path / "hf", run / "tokenizer" / "tokenizer.json")
    ids = torch.randint(0, 352, (2, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(ids)
    torch.testing.assert_close(hf_logits(out, ids), ref, atol=1e-4, rtol=1e-4)


def test_tokenizer_encodes_like_tokenmill(tmp_path: Path) -> None:
    run, _, ckpt = make_run(tmp_path)
    assert find_run_tokenizer(ckpt) == (run / "tokenizer" / "tokenizer.json").resolve()
    out = export_hf(ckpt, tmp_path / "hf")
    hf_tok = transformers.PreTrainedTokenizerFast.from_pretrained(out, local_files_only=True)
    ours = load_tokenizer(run / "tokenizer" / "tokenizer.json")
    expected = ours.encode(SAMPLE, add_special_tokens=False).ids
    assert len(expected) > 5
    assert hf_tok(SAMPLE)["input_ids"] == expected  # nothing prepended or appended
    assert hf_tok.decode(expected) == SAMPLE
    assert (hf_tok.eos_token_id, hf_tok.bos_token_id, hf_tok.pad_token_id) == (0, 1, 2)


def test_refuses_non_llama(tmp_path: Path) -> None:
    run, _, ckpt = make_run(tmp_path, norm="layernorm", ffn="gelu", qk_norm=True, sliding_window=8)
    with pytest.raises(ExportError) as exc:
        export_hf(ckpt, tmp_path / "hf")
    msg = str(exc.value)
    for opt in ("model.norm=layernorm", "model.ffn=gelu", "model.qk_norm", "model.sliding_window=8"):
        assert opt in msg
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("kw,opt", [({"position": "learned"}, "model.position=learned"),
                                    ({"n_experts": 2, "top_k": 1}, "model.n_experts=2"),
                                    ({"mup": True}, "model.mup")])
def test_refuses_each_option(tmp_path: Path, kw: dict, opt: str) -> None:
    _, _, ckpt = make_run(tmp_path, **kw)
    with pytest.raises(ExportError, match=opt):
        export_hf(ckpt, tmp_path / "hf")


def test_missing_tokenizer_and_nonempty_out(tmp_path: Path) -> None:
    run, _, ckpt = make_run(tmp_path)
    (run / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(ExportError, match="--tokenizer"):
        export_hf(ckpt, tmp_path / "hf")
    out = tmp_path / "busy"
    out.mkdir()
    (out / "x").write_text("keep")
    with pytest.raises(ExportError, match="not empty"):
        export_hf(ckpt, out, tmp_path / "none.json")
    assert (out / "x").read_text() == "keep"


def test_cli_export_hf(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tokenmill.cli import app

    run, model, _ = make_run(tmp_path, tie_embeddings=False)
    res = CliRunner().invoke(app, ["export", "hf", str(run / "checkpoints"), str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    assert Path(res.output.strip().splitlines()[-1]) == tmp_path / "hf"
    # the step and every file written, each with the mode a new file gets (the weights were 0600)
    from tokenmill.export.hf import EXPORT_FILES

    assert f"✓ export hf step 3 of {run / 'checkpoints'} → {tmp_path / 'hf'}" in res.output
    assert all(f"  {name}  " in res.output for name in EXPORT_FILES)
    assert len({(tmp_path / "hf" / name).stat().st_mode & 0o777 for name in EXPORT_FILES}) == 1
    ids = torch.randint(0, 352, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(hf_logits(tmp_path / "hf", ids), model(ids), atol=1e-4, rtol=1e-4)
    again = CliRunner().invoke(app, ["export", "hf", str(run / "checkpoints"), str(tmp_path / "hf")])
    assert again.exit_code == 1 and "--force" in again.output
    forced = CliRunner().invoke(app, ["export", "hf", str(run / "checkpoints"), str(tmp_path / "hf"), "--force",
                                      "--tokenizer", str(run / "tokenizer" / "tokenizer.json")])
    assert forced.exit_code == 0, forced.output


def test_refuses_tokenizer_larger_than_model(tmp_path: Path) -> None:
    _, _, ckpt = make_run(tmp_path, vocab_size=300)  # the tokenizer has 340 tokens
    with pytest.raises(ExportError, match="340 tokens"):
        export_hf(ckpt, tmp_path / "hf")
