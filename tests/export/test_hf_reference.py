"""The HF reference path (export/hf_reference.py): a tiny model trained on real text, exported,
scores the shipped generative and code sets through transformers' generate to the same answers,
item by item, and the same numbers as tokenmill's scorer; a reference with wrong stop handling
is caught; `tokenmill eval --reference-hf` prints both and refuses an export of another step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.config import load_config
from tokenmill.eval.config import TaskConfig
from tokenmill.eval.tasks import score_task
from tokenmill.export.hf import export_hf
from tokenmill.export.hf_reference import (
    ReferenceError,
    check_against_hf,
    compare,
    load_reference,
    reference_score,
    run_tasks,
)
from tokenmill.runs import RunDir

from tests.conftest import real_documents
from tests.eval.test_trace import write_sourced

pytest.importorskip("transformers")

QUIZ = {"name": "quiz", "path": "package:tasks/quiz_qa.jsonl", "format": "jsonl", "shots": 2, "limit": 10,
        "generation": {"max_new_tokens": 8, "stop": ["\n"]}}
CODE = {"name": "code", "path": "package:tasks/python_code.jsonl", "format": "jsonl", "limit": 6,
        "generation": {"max_new_tokens": 20, "stop": ["\ndef ", "\nclass "]}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """A run trained 200 steps on real prose and code (window 64: the few-shot quiz prompts and the
    code prompts are cut on the left), its eval.tasks the first items of the two shipped sets."""
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize
    from tokenmill.train.trainer import run_train

    root = tmp_path_factory.mktemp("hfref")
    overrides = ["name=r", f"root={root}", "tokenizer.vocab_size=512", "tokenize.val_fraction=0.1", "tokenize.min_val_docs=1",
                 "model.d_model=64", "model.n_layers=2", "model.n_heads=4", "model.max_seq_len=64",
                 "train.max_steps=200", "train.seq_len=64", "train.micro_batch=8", "train.grad_accum=1", "train.lr=0.01",
                 "train.eval_every=0", "train.ckpt_every=100", "train.device=cpu",
                 f"eval.tasks={json.dumps([QUIZ, CODE])}"]
    r = RunDir.create(load_config(None, overrides))
    docs = real_documents()
    write_sourced(r.path, {"prose": docs["prose"][:20], "code": docs["code"][:8]})
    run_tokenizer(r)
    run_tokenize(r)
    run_train(r, progress=False)
    return r


@pytest.fixture(scope="module")
def export(run: RunDir) -> Path:
    return export_hf(run.sub("checkpoints"), run.path / "hf")


@pytest.fixture(scope="module")
def rows(run: RunDir, export: Path) -> list[dict]:
    return check_against_hf(run, export)


@pytest.mark.slow
def test_tokenmill_and_hf_generate_agree_item_by_item_and_in_numbers(rows: list[dict]) -> None:
    assert [r["name"] for r in rows] == ["quiz", "code"] and [r["n"] for r in rows] == [10, 6]
    for r in rows:
        assert r["differing"] == [] and r["agree"], r
        assert r["tokenmill"] == r["reference"] and set(r["tokenmill"]) >= {"acc"}
        assert r["nonempty"] == r["n"]  # text was compared, not empty strings
    assert rows[0]["distinct"] >= 3  # the quiz answers depend on the prompt (the code ones are all newlines)
    assert "exact_match" in rows[0]["tokenmill"] and "pass@1" in rows[1]["tokenmill"]


def test_known_answers_give_the_same_nonzero_number(run: RunDir, export: Path, tmp_path: Path) -> None:
    """Zero-shot (so the accepted answers do not enter any prompt), half the items' accepted answer is
    what the model writes, upper-cased (lm-eval's normalisation lowercases), half a string it does
    not write: both paths must score exactly 0.5 and agree item by item."""
    from tokenmill.eval.tasks import load_task

    quiz = TaskConfig.model_validate({**QUIZ, "shots": 0})
    model, tok = _tokenmill(run)
    first = score_task(model, tok, quiz, torch.device("cpu"), 8, 64, 0, 0)
    path = tmp_path / "known.jsonl"
    with path.open("w") as f:
        for i, it in enumerate(load_task(quiz)[:10]):
            answer = first["outputs"][i]["output"].upper() if i % 2 == 0 else " no model writes this"
            f.write(json.dumps({"prompt": it.prompt, "answer": [answer]}) + "\n")
    known = quiz.model_copy(update={"path": str(path)})
    ref = load_reference(export)
    ours, theirs = score_task(model, tok, known, torch.device("cpu"), 8, 64, 0, 0), reference_score(ref, known, 64)
    assert ours["exact_match"] == theirs["exact_match"] == 0.5
    assert compare(ours, theirs, ref.tokenizer)["agree"]


def test_a_prompt_holding_the_eos_string_is_text_on_both_paths(run: RunDir, export: Path, tmp_path: Path) -> None:
    """The HF tokenizer would turn "<|endoftext|>" in a prompt into EOS; tokenmill encodes it as text,
    and so must the reference, or the two paths answer different prompts."""
    path = tmp_path / "eos.jsonl"
    prompts = ["Question: what ends <|endoftext|> a document?\nAnswer:", "<|endoftext|><|endoftext|> The capital of France is"]
    path.write_text("".join(json.dumps({"prompt": p, "answer": " x"}) + "\n" for p in prompts))
    cfg = TaskConfig.model_validate({**QUIZ, "path": str(path), "shots": 0, "limit": None})
    model, tok = _tokenmill(run)
    ref = load_reference(export)
    ours, theirs = score_task(model, tok, cfg, torch.device("cpu"), 8, 64, 0, 0), reference_score(ref, cfg, 64)
    assert compare(ours, theirs, ref.tokenizer)["agree"]
    plain = ref.tokenizer(prompts[1], add_special_tokens=False)["input_ids"]
    assert plain[:2] == [ref.eos_id, ref.eos_id]  # what the reference would have fed without split_special_tokens


def _tokenmill(run: RunDir) -> tuple:
    from tokenmill.tokenizer.bpe import load_tokenizer
    from tokenmill.train.restore import load_model

    return load_model(run.sub("checkpoints"), "cpu")[0], load_tokenizer(run.sub("tokenizer", "tokenizer.json"))


@pytest.mark.parametrize("perturb", ["one_token_more", "wrong_stop"])
def test_a_perturbed_reference_is_caught(run: RunDir, export: Path, perturb: str) -> None:
    """A reference generating one token past the limit, or cutting at a stop string the task does
    not have (" "), must disagree: the comparison can fail, and names where."""
    quiz = TaskConfig.model_validate(QUIZ)
    gen = quiz.generation
    bad = gen.model_copy(update={"max_new_tokens": gen.max_new_tokens + 1} if perturb == "one_token_more" else {"stop": ["\n", " "]})
    model, tok = _tokenmill(run)
    ours = score_task(model, tok, quiz, torch.device("cpu"), 8, 64, 0, 0)
    ref = load_reference(export)
    theirs = reference_score(ref, quiz.model_copy(update={"generation": bad}), 64 + (perturb == "one_token_more"))
    got = compare(ours, theirs, ref.tokenizer)
    assert not got["agree"] and len(got["differing"]) >= 5
    for d in got["differing"]:
        assert d["tokenmill"] != d["reference"]
        if perturb == "wrong_stop":  # the answers start with a space: cut to nothing, differing from token 0
            assert d["reference"] == "" and d["token"] == 0
        else:  # the same answer and then one more token
            assert d["reference"].startswith(d["tokenmill"]) and d["token"] >= 1


def test_a_sampled_task_is_refused(export: Path) -> None:
    sampled = TaskConfig.model_validate({**QUIZ, "generation": {"temperature": 0.7, "max_new_tokens": 4}})
    with pytest.raises(ReferenceError, match="only greedy generation"):
        reference_score(load_reference(export), sampled, 64)


def test_cli_prints_both_paths_and_refuses_an_export_of_another_step(run: RunDir, export: Path) -> None:
    runner = CliRunner()
    base = ["eval", str(run.path / "config.yaml"), "--run-dir", str(run.path)]
    ok = runner.invoke(app, [*base, "--reference-hf", str(export), "--limit", "3"])
    assert ok.exit_code == 0, ok.output
    assert "HF reference" in ok.output and "pass@1" in ok.output and "exact_match" in ok.output
    assert [t.name for t in run_tasks(run)] == ["quiz", "code"]
    old = export_hf(run.sub("checkpoints", "step_100"), run.path / "hf_step100")
    bad = runner.invoke(app, [*base, "--reference-hf", str(old)])
    assert bad.exit_code == 1 and "an export of step 100, the checkpoint compared is step 200" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def test_cli_exits_1_naming_the_items_when_the_export_computes_something_else(run: RunDir, export: Path, tmp_path: Path) -> None:
    """An export of the same step whose final norm lost its sign (a broken conversion): the answers
    differ, the CLI lists them with their first differing token and exits 1."""
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(export, broken)
    weights = load_file(broken / "model.safetensors")
    weights["model.norm.weight"] = -weights["model.norm.weight"]  # a sign lost in conversion: logits negated
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt", "tokenmill_step": "200"})
    base = ["eval", str(run.path / "config.yaml"), "--run-dir", str(run.path), "--reference-hf", str(broken), "--limit", "4"]
    got = CliRunner().invoke(app, base)
    assert got.exit_code == 1, got.output
    assert "first differing token" in got.output and "tokenmill and the HF reference disagree" in got.output
