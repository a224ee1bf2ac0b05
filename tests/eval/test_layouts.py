"""MMLU (cais/mmlu JSONL and the original CSV) and BIG-bench task.json layouts: prompts as
lm-evaluation-harness / BIG-bench build them, scores equal to the generic JSONL layout of the same
items, every real BIG-bench task loading in its forms, and one-line errors for malformed items."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tokenmill.config import TaskConfig
from tokenmill.eval.tasks import (GenItem, Item, TaskError, item_scores, load_task, prompt_prefix, score_task,
                                  shot_indices, summarize)

from tests.conftest import ContextFreeModel
from tests.eval import test_tasks

FIXTURES = Path(__file__).parent / "fixtures"
MMLU_JSONL = FIXTURES / "mmlu" / "european_geography.jsonl"
MMLU_CSV = FIXTURES / "mmlu" / "european_geography_test.csv"
CRASH_BLOSSOM = FIXTURES / "bigbench" / "crash_blossom" / "task.json"
AUTO_DEBUGGING = FIXTURES / "bigbench" / "auto_debugging" / "task.json"
REAL_BIGBENCH = Path("/work/real_corpora/eval/bigbench")
HEADER = "The following are multiple choice questions (with answers) about european geography.\n\n"
CPU = torch.device("cpu")
tok, model = test_tasks.tok, test_tasks.model  # the tiny tokenizer and model fixtures the other task tests score with


def mmlu(path: Path, **kw) -> TaskConfig:
    return TaskConfig(name="mmlu", path=str(path), format="mmlu", **kw)


def bigbench(path: Path, **kw) -> TaskConfig:
    return TaskConfig(name="bb", path=str(path), format="bigbench", **kw)


# --------------------------------------------------------------------------- MMLU
def test_mmlu_jsonl_and_csv_read_the_same_items_as_lm_eval_prompts_them():
    from_jsonl, from_csv = load_task(mmlu(MMLU_JSONL)), load_task(mmlu(MMLU_CSV))
    assert len(from_jsonl) == len(from_csv) == 10
    for a, b in zip(from_jsonl, from_csv):
        assert (a.contexts, a.continuations, a.gold, a.header, a.line) == (b.contexts, b.continuations, b.gold, b.header, b.line)
    first = from_csv[0]
    assert first.contexts == ["What is the capital of Abkhazia?\nA. Sukhumi\nB. Yerevan\nC. Zagreb\nD. Tirana\nAnswer:"] * 4
    assert first.continuations == [" A", " B", " C", " D"] and first.header == HEADER
    assert [it.gold for it in from_csv] == [i % 4 for i in range(10)] and [it.line for it in from_csv] == list(range(1, 11))
    assert first.solved() == first.contexts[0] + " A"  # lm-eval's solved shot: no header


def test_mmlu_few_shot_prompt_has_the_header_once_then_the_shots():
    items = load_task(mmlu(MMLU_JSONL, shots=2))
    i = 3
    a, b = shot_indices(i, len(items), 2)
    expected = HEADER + items[a].solved() + "\n\n" + items[b].solved() + "\n\n"
    assert prompt_prefix(items, i, 2) == expected and expected.count("The following are") == 1
    assert prompt_prefix(items, i, 0) == HEADER


def test_mmlu_scores_equal_the_generic_jsonl_layout_of_the_same_items(tmp_path, model, tok):
    """Zero-shot an MMLU item is the generic layout's {"prompt": header + question, "choices": A-D}."""
    items = load_task(mmlu(MMLU_CSV))
    generic = tmp_path / "generic.jsonl"
    generic.write_text("".join(json.dumps({"prompt": it.header + it.contexts[0], "choices": list("ABCD"), "answer": it.gold}) + "\n"
                               for it in items))
    generic_cfg = TaskConfig(name="mmlu", path=str(generic), format="jsonl")
    runs = [(cfg, item_scores(model, tok, cfg, load_task(cfg), CPU, b, 256))
            for cfg, b in ((mmlu(MMLU_CSV), 8), (mmlu(MMLU_JSONL), 5), (generic_cfg, 16))]
    flat = [[lp for s in scores for lp in s.logprobs] for _, scores in runs]
    assert len(flat[0]) == 40 and flat[0] == pytest.approx(flat[1], abs=1e-6) and flat[0] == pytest.approx(flat[2], abs=1e-6)
    ours, theirs = summarize(*runs[0]), summarize(*runs[2])
    assert (ours["acc"], ours["acc_norm"], ours["n"]) == (theirs["acc"], theirs["acc_norm"], 10)
    assert ours == score_task(model, tok, mmlu(MMLU_CSV), CPU, 8, 256)


def test_a_model_that_always_says_b_scores_the_share_of_b_answers(tok):
    """A context-free model whose likeliest token is the last of " B" picks B on every item."""
    letters = [tok.encode(" " + c, add_special_tokens=False).ids for c in "ABCD"]
    assert len({ids[-1] for ids in letters}) == 4 and len({tuple(ids[:-1]) for ids in letters}) == 1, letters
    logits = torch.full((tok.get_vocab_size(),), -10.0)
    logits[letters[1][-1]] = 0.0
    for shots in (0, 3):
        res = score_task(ContextFreeModel(logits), tok, mmlu(MMLU_JSONL, shots=shots), CPU, 3, 256)
        golds = [it.gold for it in load_task(mmlu(MMLU_JSONL))]
        assert res["acc"] == golds.count(1) / 10 == 0.3


# --------------------------------------------------------------------------- BIG-bench
def test_bigbench_multiple_choice_prompt_follows_bigbench():
    task = json.loads(CRASH_BLOSSOM.read_text())
    items = load_task(bigbench(CRASH_BLOSSOM, shots=2))
    assert len(items) == len(task["examples"]) == 38 and all(isinstance(it, Item) for it in items)
    ex, first = task["examples"][0], items[0]
    # example_input_prefix "\n", choices not appended, default output prefix "\nA: " (its space moves to the choice)
    assert first.contexts == ["\n" + ex["input"] + "\nA:"] * 4
    assert first.continuations == [" verb", " adjective", " noun", " preposition"] and first.gold == 1 and first.line == 0
    assert first.header == task["task_prefix"] and first.solved() == "\n" + ex["input"] + "\nA: adjective"
    a, b = shot_indices(5, len(items), 2)  # BIG-bench: task_prefix, shots joined by "\n", "\n", the item
    assert prompt_prefix(items, 5, 2) == task["task_prefix"] + items[a].solved() + "\n" + items[b].solved() + "\n"


def test_bigbench_lists_choices_in_bigbench_order_and_reads_both_forms(tmp_path):
    scores = {"paris": 1, "rome": 0, "berlin": 0, "madrid": 0.5}
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"examples": [{"input": "Capital of France?", "target_scores": scores},
                                             {"input": "2+2", "target": ["4", "four"]}]}))
    listed = list(np.random.RandomState(42).permutation(sorted(scores)))  # BIG-bench's json task (lm-eval's port)
    prompt = "\nQ: Capital of France?" + "".join("\n  choice: " + c for c in listed) + "\nA: "
    mc = load_task(bigbench(path))  # auto: multiple choice, the generative-only example is not of that form
    assert len(mc) == 1 and mc[0].contexts[0] == prompt.rstrip(" ") and mc[0].continuations == [" paris", " rome", " berlin", " madrid"]
    gen = load_task(bigbench(path, mode="generate", shots=1))
    assert all(isinstance(it, GenItem) for it in gen) and [it.line for it in gen] == [0, 1]
    assert (gen[0].prompt, gen[0].answers) == (prompt, ["paris"])  # a choice example's answer: its best choice
    assert (gen[1].prompt, gen[1].answers) == ("\nQ: 2+2\nA: ", ["4", "four"])
    assert prompt_prefix(gen, 1, 1) == prompt + "paris\n"


def test_bigbench_generative_task_and_mode(tmp_path):
    items = load_task(bigbench(AUTO_DEBUGGING))
    task = json.loads(AUTO_DEBUGGING.read_text())
    assert len(items) == 34 and all(isinstance(it, GenItem) for it in items)
    assert items[0].prompt == "\n" + task["examples"][0]["input"] + "\n" and items[0].answers == ["2"]
    with pytest.raises(TaskError, match=r"auto_debugging/task\.json: no example has 'target_scores'"):
        load_task(bigbench(AUTO_DEBUGGING, mode="multiple_choice"))


def test_a_real_bigbench_task_scores_as_the_generic_jsonl_layout_of_its_items(tmp_path, model, tok):
    items = load_task(bigbench(CRASH_BLOSSOM))
    scores = [ex["target_scores"] for ex in json.loads(CRASH_BLOSSOM.read_text())["examples"]]
    generic = tmp_path / "generic.jsonl"
    generic.write_text("".join(json.dumps({"prompt": it.header + it.contexts[0], "choices": list(s), "answer": it.gold}) + "\n"
                               for it, s in zip(items, scores)))
    ours = score_task(model, tok, bigbench(CRASH_BLOSSOM, limit=20), CPU, 8, 256)
    theirs = score_task(model, tok, TaskConfig(name="bb", path=str(generic), format="jsonl", limit=20), CPU, 8, 256)
    assert ours["n"] == theirs["n"] == 20 and (ours["acc"], ours["acc_norm"]) == (theirs["acc"], theirs["acc_norm"])


def real_tasks() -> list[str]:
    return sorted(p.parent.name for p in REAL_BIGBENCH.glob("*/task.json")) or ["(absent)"]


@pytest.mark.parametrize("name", real_tasks())
def test_every_real_bigbench_task_loads_in_its_forms(name):
    if not REAL_BIGBENCH.is_dir():
        pytest.skip(f"{REAL_BIGBENCH} is absent (shared/corpora/fetch_real_corpora.sh builds it)")
    with (REAL_BIGBENCH / "TASKS.tsv").open() as f:
        row = next(r for r in csv.DictReader(f, delimiter="\t") if r["task"] == name)
    path = REAL_BIGBENCH / name / "task.json"
    n, n_mc = int(row["n_examples"]), int(row["n_multiple_choice"])
    gen = load_task(bigbench(path, mode="generate"))
    assert len(gen) == n and all(isinstance(it, GenItem) and it.answers for it in gen)
    if n_mc:
        mc = load_task(bigbench(path, mode="multiple_choice"))
        assert len(mc) == n_mc and all(isinstance(it, Item) and len(it.continuations) >= 2 for it in mc)
        assert load_task(bigbench(path)) == mc
    else:
        with pytest.raises(TaskError, match="no multiple-choice form"):
            load_task(bigbench(path, mode="multiple_choice"))


# --------------------------------------------------------------------------- malformed items
GOOD_MMLU = {"question": "q?", "subject": "s", "choices": ["a", "b", "c", "d"], "answer": 0}


@pytest.mark.parametrize("bad, message", [
    ({k: v for k, v in GOOD_MMLU.items() if k != "choices"}, r"t\.jsonl:2 \(mmlu\): missing field 'choices'"),
    ({**GOOD_MMLU, "choices": ["a", "b", "c"]}, r"t\.jsonl:2 \(mmlu\): field 'choices' must be a list of 4 strings"),
    ({**GOOD_MMLU, "answer": 4}, r"t\.jsonl:2 \(mmlu\): field 'answer' must be 0-3 or a letter A-D, got 4"),
    ({**GOOD_MMLU, "subject": None}, r"t\.jsonl:2 \(mmlu\): missing field 'subject'"),
])
def test_malformed_mmlu_jsonl_item_is_one_line_naming_file_and_line(tmp_path, bad, message):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD_MMLU) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TaskError, match=message) as e:
        load_task(mmlu(path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("row, message", [
    ('"q?",a,b,c,d,E', r"t_test\.csv:3 \(mmlu\): field 'answer' must be 0-3 or a letter A-D, got 'E'"),
    ("q?,a,b,c,d", r"t_test\.csv:3 \(mmlu\): expected 6 columns \(question, A, B, C, D, answer\), got 5"),
    ('"unclosed,a,b,c,d,A', r"t_test\.csv:3: not valid CSV"),
])
def test_malformed_mmlu_csv_row_is_one_line_naming_file_and_line(tmp_path, row, message):
    path = tmp_path / "t_test.csv"
    path.write_text('"a question\nover two lines",a,b,c,d,B\n' + row + "\n")
    with pytest.raises(TaskError, match=message) as e:
        load_task(mmlu(path))
    assert "\n" not in str(e.value)


GOOD_EX = {"input": "i", "target_scores": {"x": 1, "y": 0}}


@pytest.mark.parametrize("text, mode, message", [
    ("{not json", "auto", r"task\.json: not valid JSON"),
    ('{"examples": ' + "[" * 100_000 + "]" * 100_000 + "}", "auto", r"task\.json: JSON nested deeper than 200 levels$"),
    (b"{\xff}", "auto", r"task\.json: not UTF-8 text"),
    ("[]", "auto", r"task\.json: a BIG-bench task.json must be one JSON object with an 'examples' list"),
    ({"examples": [GOOD_EX, {"target": "t"}]}, "auto", r"task\.json: example 1: missing field 'input'"),
    ({"examples": [GOOD_EX, {"input": "i"}]}, "auto", r"task\.json: example 1: missing field 'target_scores' or 'target'"),
    ({"examples": [GOOD_EX, {"input": "i", "target_scores": {"x": 0, "y": 0}}]}, "generate",
     r"task\.json: example 1: target_scores has no positive score"),
    ({"examples": [GOOD_EX, {"input": "i", "target_scores": {"x": "1", "y": 0}}]}, "auto",
     r"task\.json: example 1: target_scores\['x'\] must be a number"),
    ({"examples": [GOOD_EX, {"input": "i", "target_scores": {"x": 1}}]}, "auto",
     r"task\.json: example 1: field 'target_scores' must be an object of at least 2 choices"),
    ({"examples": [GOOD_EX, {"input": "i", "target": []}]}, "auto",
     r"task\.json: example 1: field 'target' must be a string or a non-empty list of strings"),
    ({"examples": [GOOD_EX, "oops"]}, "auto", r"task\.json: example 1: an example must be a JSON object"),
    ({"examples": [GOOD_EX], "append_choices_to_input": "maybe"}, "auto",
     r"task\.json \(bigbench\): field 'append_choices_to_input' must be true or false"),
    ({"examples": [GOOD_EX], "task_prefix": 3}, "auto", r"task\.json \(bigbench\): field 'task_prefix' must be a string"),
])
def test_malformed_bigbench_task_is_one_line_naming_file_and_example(tmp_path, text, mode, message):
    path = tmp_path / "task.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text if isinstance(text, str) else json.dumps(text))
    with pytest.raises(TaskError, match=message) as e:
        load_task(bigbench(path, mode=mode))
    assert "\n" not in str(e.value)
