"""`import_hf`: a Llama directory written by `transformers` itself (built from a config, no
download) and one exported by tokenmill import with the same logits; the parity check on load
uses an independent forward, and refuses what tokenmill would compute differently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.export.test_hf import make_run
from tokenmill.export.hf import export_hf
from tokenmill.export.hf_import import HFImportError, import_hf, llama_reference_logits, read_hf_weights

transformers = pytest.importorskip("transformers")


def _hf_model(tmp_path: Path, **over) -> tuple[Path, "transformers.LlamaForCausalLM"]:
    kw = dict(vocab_size=300, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rope_theta=1000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=False)
    kw.update(over)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
    with torch.no_grad():  # norm gains away from 1, so a misplaced norm shows
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.uniform_(0.5, 1.5)
    out = tmp_path / "hf"
    model.save_pretrained(out, safe_serialization=True)
    return out, model


@pytest.mark.parametrize("over", [{}, {"tie_word_embeddings": True},
                                  {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
                                  {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 16}}])
def test_a_transformers_llama_imports_with_its_logits(tmp_path, over):
    out, hf = _hf_model(tmp_path, **over)
    model, info = import_hf(out)
    ids = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(input_ids=ids).logits
        got = model(ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(llama_reference_logits(read_hf_weights(out), json.loads((out / "config.json").read_text()), ids).float(),
                               want, atol=1e-4, rtol=1e-4)
    assert info["parity"]["max_rel_diff"] < 1e-5 and info["model_config"]["n_kv_heads"] == 2


def test_export_then_import_is_the_same_model(tmp_path):
    run, model, ckpt = make_run(tmp_path)
    out = export_hf(ckpt, tmp_path / "exported", None)
    back, info = import_hf(out)
    for name, t in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], t), name
    assert info["model_config"]["rope_theta"] == 500.0


def test_what_tokenmill_cannot_reproduce_is_refused(tmp_path):
    out, _ = _hf_model(tmp_path, attention_bias=True)
    with pytest.raises(HFImportError, match="attention_bias=true"):
        import_hf(out)
    conf = json.loads((out / "config.json").read_text())
    conf.update(attention_bias=False, model_type="gpt2")
    (out / "config.json").write_text(json.dumps(conf))
    with pytest.raises(HFImportError, match="imports Llama models"):
        import_hf(out)
    (out / "model.safetensors").unlink()
    conf["model_type"] = "llama"
    (out / "config.json").write_text(json.dumps(conf))
    with pytest.raises(HFImportError, match="no model.safetensors"):
        import_hf(out)
