"""`export_hf`: the exported directory loads in HF transformers (local files only) and computes the
same function as the tokenmill checkpoint; its tokenizer encodes like tokenmill's."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
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
    """The export's tokenizer prepends the document-start token tokenmill prompts with (EOS, id 0),
    whichever way transformers is asked, and otherwise encodes like tokenmill."""
    run, _, ckpt = make_run(tmp_path)
    assert find_run_tokenizer(ckpt) == (run / "tokenizer" / "tokenizer.json").resolve()
    out = export_hf(ckpt, tmp_path / "hf")
    ours = load_tokenizer(run / "tokenizer" / "tokenizer.json")
    expected = ours.encode(SAMPLE, add_special_tokens=False).ids
    assert len(expected) > 5
    auto = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(out, local_files_only=True)
    with_bos = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True, add_bos_token=True)
    for hf_tok in (auto, fast, with_bos):
        assert hf_tok(SAMPLE)["input_ids"] == [0, *expected]  # the document start, then the text; nothing appended
        assert hf_tok.encode(SAMPLE) == [0, *expected]
        assert hf_tok(SAMPLE, add_special_tokens=False)["input_ids"] == expected
        assert hf_tok.decode([0, *expected], skip_special_tokens=True) == SAMPLE
        assert (hf_tok.eos_token_id, hf_tok.bos_token_id, hf_tok.pad_token_id) == (0, 0, 2)
    assert json.loads((out / "config.json").read_text())["bos_token_id"] == 0  # never <|bos|>, which is never trained
    again = export_hf(ckpt, tmp_path / "again", out / "tokenizer.json")  # an export's tokenizer passed as --tokenizer
    assert transformers.AutoTokenizer.from_pretrained(again, local_files_only=True)(SAMPLE)["input_ids"] == [0, *expected]


def test_every_exported_file_has_the_same_mode(tmp_path: Path) -> None:
    """safetensors writes its file 0600; the export gives it the mode of the files beside it."""
    _, _, ckpt = make_run(tmp_path)
    old = os.umask(0o022)  # the usual umask, set so the expected mode does not depend on the caller's
    try:
        out = export_hf(ckpt, tmp_path / "hf")
    finally:
        os.umask(old)
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in out.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {"0o644"}, modes


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


# --------------------------------------------------------------------------- lm-evaluation-harness
FIXTURES = Path(__file__).parents[1] / "eval" / "fixtures"
# Local tasks in lm-eval's own task YAML, written as its arc_easy, piqa and winogrande tasks are
# (lm_eval/tasks/{arc,piqa,winogrande}), reading tokenmill's test fixtures instead of the Hub.
LM_EVAL_TASKS = {
    "tm_arc": ("arc", "arc_hf.jsonl", 'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
               'doc_to_target: "{{choices.label.index(answerKey)}}"\ndoc_to_choice: "{{choices.text}}"\n'),
    "tm_piqa": ("piqa", "piqa.jsonl", 'doc_to_text: "Question: {{goal}}\\nAnswer:"\ndoc_to_target: label\n'
                'doc_to_choice: "{{[sol1, sol2]}}"\n'),
    "tm_winogrande": ("winogrande", "winogrande.jsonl", "doc_to_text: !function wg.doc_to_text\n"
                      "doc_to_target: !function wg.doc_to_target\ndoc_to_choice: !function wg.doc_to_choice\n"),
}


def lm_eval_samples(export: Path, tmp: Path) -> dict[str, list[dict]]:
    """lm-eval's per-item records (`--log_samples`) of the LM_EVAL_TASKS on `export`, from a plain
    `lm_eval run --model hf` in a subprocess, offline: nothing is downloaded."""
    tasks = tmp / "lm_eval_tasks"
    tasks.mkdir()
    # lm-eval's own winogrande functions (partial scoring: the options fill the context)
    (tasks / "wg.py").write_text("from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_choice, doc_to_target, doc_to_text\n")
    for name, (_, fixture, docs) in LM_EVAL_TASKS.items():
        (tasks / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {FIXTURES / fixture}\n"
            "output_type: multiple_choice\ntest_split: test\n" + docs
            + "metric_list:\n  - metric: acc\n  - metric: acc_norm\n  - metric: acc_bytes\n"
        )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf_home"),
           "TOKENIZERS_PARALLELISM": "false"}  # wg.py is found beside the YAML that names it
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args", f"pretrained={export},dtype=float32",
           "--tasks", ",".join(LM_EVAL_TASKS), "--include_path", str(tasks), "--device", "cpu", "--batch_size", "4",
           "--output_path", str(tmp / "lm_eval_out"), "--log_samples"]
    done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = {}
    for name in LM_EVAL_TASKS:
        (path,) = (tmp / "lm_eval_out").rglob(f"samples_{name}_*.jsonl")
        out[name] = sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["doc_id"])
    return out


# Both sides compute an fp32 log-softmax of logits that agree to ~1e-5 (test_logits_match); a
# continuation's log-likelihood sums at most 64 such terms (the window), so 64 · 1e-5 bounds the gap.
LL_TOL = 64 * 1e-5


def test_lm_eval_on_the_export_gives_tokenmills_scores_item_by_item(tmp_path: Path) -> None:
    """lm-evaluation-harness itself, run on the export as a user runs it, computes the same per-choice
    log-likelihoods as tokenmill's task scorer on the checkpoint, so the same acc, acc_norm and
    acc_bytes picks on every item. The model's window (64) is shorter than some requests, so both
    sides' left truncation is compared too."""
    pytest.importorskip("lm_eval")
    from tokenmill.config import TaskConfig
    from tokenmill.eval.tasks import score_task

    checked = ties = 0
    run, model, ckpt = make_run(tmp_path)
    theirs = lm_eval_samples(export_hf(ckpt, tmp_path / "hf"), tmp_path)
    tok = load_tokenizer(run / "tokenizer" / "tokenizer.json")
    for name, (fmt, fixture, _) in LM_EVAL_TASKS.items():
        cfg = TaskConfig(name=name, path=str(FIXTURES / fixture), format=fmt)
        ours = score_task(model, tok, cfg, torch.device("cpu"), 4, 64, eos_id=0, pad_id=2)
        assert len(ours["items"]) == len(theirs[name]) >= 6
        for mine, their in zip(ours["items"], theirs[name]):
            lls = [float(r[0][0]) for r in their["resps"]]
            assert mine["logprobs"] == pytest.approx(lls, abs=LL_TOL, rel=0), (name, mine["line"])
            if name != "tm_winogrande":  # there lm-eval's target is the shared continuation, the gold its doc_to_text
                assert mine["gold"] == int(their["target"])
            for metric, pick, lengths in (("acc", "pick", None), ("acc_norm", "pick_norm", "chars"),
                                          ("acc_bytes", "pick_bytes", "bytes")):
                per = [lp / (mine[lengths][j] if lengths else 1) for j, lp in enumerate(mine["logprobs"])]
                best, second = sorted(per)[-2:][::-1]
                if best - second <= 2 * LL_TOL:  # a near tie: another CPU's rounding may pick the other choice
                    ties += 1
                    continue
                checked += 1
                assert their[metric] == float(mine[pick] == mine["gold"]), (name, mine["line"], metric)
    assert checked >= 3 * ties and checked > 50  # most picks are clear, and those agree
