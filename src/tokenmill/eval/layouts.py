"""Task layouts beyond the JSONL-per-item ones: MMLU (JSONL or the original CSV) and BIG-bench's
`task.json`.

MMLU (`format: mmlu`), prompted as lm-evaluation-harness's MMLU task: the header "The following
are multiple choice questions (with answers) about {subject}.\\n\\n" once at the top, then
"{question}\\nA. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer:" scored with the continuations " A".." D".
Two files are read: the Hugging Face `cais/mmlu` JSONL ({"question", "subject", "choices": [4
strings], "answer": 0-3}) and the original CSV (question, A, B, C, D, answer letter; no header),
chosen by the `.csv` extension; a CSV's subject is its file name without `_test`/`_dev`/`_val`
("abstract_algebra_test.csv": abstract algebra). `answer` may be an index 0-3 or a letter A-D in
either. Shots come from the other items of the same file (lm-eval takes them from the subject's
dev split).

BIG-bench (`format: bigbench`): one `task.json` object whose `examples` each hold `input` and
`target_scores` (multiple choice) and/or `target` (string or list: generative). The prompt follows
BIG-bench's json task as lm-evaluation-harness ports it: `task_prefix` once at the top, each
example `example_input_prefix` (default "\\nQ: ") + input, with `append_choices_to_input` (default
true) `choice_prefix` (default "\\n  choice: ") before each choice in the order
`numpy.random.RandomState(42).permutation(sorted(choices))`, then `example_output_prefix` (default
"\\nA: "); shots joined by `few_shot_example_separator` (default "\\n"). Multiple choice scores each
choice as the continuation, gold the highest `target_scores`; a generative item's answers are its
`target`, else (BIG-bench's rule) its highest-scoring choices. `TaskConfig.mode` picks the form
(auto: multiple choice when any example has `target_scores`); examples of the other form only are
not used. An item's `line` is its 0-based index in `examples`.

Differences from BIG-bench, on purpose: trailing spaces of the prompt move to the front of the
scored continuation (the same text; BPE words carry their leading space, as lm-eval's target
delimiter does); ties for the highest score take the first choice as gold (BIG-bench's
multiple_choice_grade credits any of them; geometric_shapes has ties in 72 of 360 examples);
`append_choices_to_input: "false"` (a string, in one real task) reads as false; `stop_string`
and `output_regex` are not applied (set `generation.stop`); duplicate examples are kept.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tokenmill import json_limits
from tokenmill.eval.items import GenItem, Item, TaskError, need, str_field

MMLU_LETTERS = "ABCD"
BIGBENCH_SEED = 42  # BIG-bench's json task (and lm-eval's port) shuffles the listed choices with this seed


# --------------------------------------------------------------------------- MMLU
def mmlu_header(subject: str) -> str:
    return f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"


def _mmlu_answer(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 4:
        return value
    if isinstance(value, str) and value.strip() in tuple(MMLU_LETTERS):
        return MMLU_LETTERS.index(value.strip())
    raise TaskError(f"{where}: field 'answer' must be 0-3 or a letter A-D, got {value!r}")


def mmlu_item(question: str, choices: list[str], answer: Any, subject: str, where: str) -> Item:
    """One MMLU item as lm-eval prompts it (the subject header kept apart, shown once per prompt)."""
    gold = _mmlu_answer(answer, where)
    ctx = question.strip() + "\n" + "".join(f"{letter}. {c}\n" for letter, c in zip(MMLU_LETTERS, choices)) + "Answer:"
    return Item([ctx] * 4, [" " + letter for letter in MMLU_LETTERS], gold, 0, header=mmlu_header(subject))


def mmlu_record(rec: dict, where: str) -> Item:
    """A `cais/mmlu` JSONL record: {"question", "subject", "choices": [4 strings], "answer"}."""
    choices = need(rec, "choices", where)
    if not isinstance(choices, list) or len(choices) != 4 or not all(isinstance(c, str) for c in choices):
        raise TaskError(f"{where}: field 'choices' must be a list of 4 strings")
    subject = str_field(rec, "subject", where)
    return mmlu_item(str_field(rec, "question", where), choices, need(rec, "answer", where), subject, where)


def load_mmlu_csv(path: Path) -> list[Item]:
    """The original MMLU CSV: question, A, B, C, D, answer letter; no header row. `line`: the
    record's first line in the file (a quoted field may span lines)."""
    subject = re.sub(r"_(test|dev|val)$", "", path.stem)
    items: list[Item] = []
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader, start = csv.reader(f, strict=True), 1
            for row in reader:
                where = f"{path}:{start} (mmlu)"
                if any(cell.strip() for cell in row):
                    if len(row) != 6:
                        raise TaskError(f"{where}: expected 6 columns (question, A, B, C, D, answer), got {len(row)}")
                    item = mmlu_item(row[0], row[1:5], row[5], subject, where)
                    item.line = start
                    items.append(item)
                start = reader.line_num + 1
    except UnicodeDecodeError as e:
        raise TaskError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise TaskError(f"{path}:{start}: not valid CSV ({e})") from None
    return items


# --------------------------------------------------------------------------- BIG-bench
@dataclass
class BigBenchFormat:
    """A task.json's prompt fields, with BIG-bench's defaults."""

    task_prefix: str = ""
    input_prefix: str = "\nQ: "
    output_prefix: str = "\nA: "
    choice_prefix: str = "\n  choice: "
    append_choices: bool = True
    separator: str = "\n"


def _bigbench_format(task: dict, where: str) -> BigBenchFormat:
    fmt = BigBenchFormat()
    fields = {
        "task_prefix": "task_prefix",
        "example_input_prefix": "input_prefix",
        "example_output_prefix": "output_prefix",
        "choice_prefix": "choice_prefix",
        "few_shot_example_separator": "separator",
    }
    for key, attr in fields.items():
        if key in task:
            setattr(fmt, attr, str_field(task, key, where))
    append = task.get("append_choices_to_input", True)
    if isinstance(append, str) and append.strip().lower() in ("true", "false"):
        append = append.strip().lower() == "true"
    if not isinstance(append, bool):
        raise TaskError(f"{where}: field 'append_choices_to_input' must be true or false, got {append!r}")
    fmt.append_choices = append
    return fmt


def _target_scores(ex: dict, where: str) -> dict[str, float] | None:
    scores = ex.get("target_scores")
    if scores is None:
        return None
    if not isinstance(scores, dict) or len(scores) < 2:
        raise TaskError(f"{where}: field 'target_scores' must be an object of at least 2 choices")
    for choice, score in scores.items():
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise TaskError(f"{where}: target_scores[{choice!r}] must be a number, got {score!r}")
    if max(scores.values()) <= 0:
        raise TaskError(f"{where}: target_scores has no positive score, so no choice is correct")
    return scores


def _targets(ex: dict, where: str) -> list[str] | None:
    target = ex.get("target")
    if target is None:
        return None
    if isinstance(target, str):
        return [target]
    if not isinstance(target, list) or not target or not all(isinstance(t, str) for t in target):
        raise TaskError(f"{where}: field 'target' must be a string or a non-empty list of strings")
    return target


def _bigbench_prompt(fmt: BigBenchFormat, text: str, scores: dict[str, float] | None) -> str:
    """BIG-bench's formatted input: prefix, input, the shuffled choices (when listed), output prefix."""
    if scores is not None and fmt.append_choices:
        keys = sorted(scores)
        order = np.random.RandomState(BIGBENCH_SEED).permutation(len(keys))
        text += fmt.choice_prefix + fmt.choice_prefix.join(keys[i] for i in order)
    return fmt.input_prefix + text + fmt.output_prefix


def _bigbench_example(fmt: BigBenchFormat, ex: Any, mc: bool, index: int, where: str) -> Item | GenItem | None:
    """One example in the chosen form (None when it has only the other form)."""
    if not isinstance(ex, dict):
        raise TaskError(f"{where}: an example must be a JSON object, got {type(ex).__name__}")
    scores, targets = _target_scores(ex, where), _targets(ex, where)
    if scores is None and targets is None:
        raise TaskError(f"{where}: missing field 'target_scores' or 'target'")
    prompt = _bigbench_prompt(fmt, str_field(ex, "input", where), scores)
    if not mc:
        best = [k for k, v in scores.items() if v == max(scores.values())] if scores else []
        return GenItem(prompt, targets or best, index, header=fmt.task_prefix, shot_separator=fmt.separator)
    if scores is None:
        return None
    ctx = prompt.rstrip(" ")  # the spaces move onto the continuation: the same text, words keep their BPE space
    moved = prompt[len(ctx) :]
    if any(not (moved + k) for k in scores):
        raise TaskError(f"{where}: target_scores has an empty choice")
    gold = list(scores.values()).index(max(scores.values()))
    choices = list(scores)  # lm-eval's doc_to_choice: the targets themselves, whatever spaces moved before them
    return Item([ctx] * len(scores), [moved + k for k in scores], gold, index, fmt.task_prefix, fmt.separator, choices)


def load_bigbench(path: Path, mode: Literal["auto", "multiple_choice", "generate"]) -> list[Item | GenItem]:
    """Every example of a BIG-bench task.json in the form `mode` picks."""
    task = json_limits.load_file(path, TaskError)  # depth-checked: a 100k-deep file is one line, not a RecursionError
    if not isinstance(task, dict) or not isinstance(task.get("examples"), list):
        raise TaskError(f"{path}: a BIG-bench task.json must be one JSON object with an 'examples' list")
    fmt = _bigbench_format(task, f"{path} (bigbench)")
    examples = task["examples"]
    any_mc = any(isinstance(ex, dict) and ex.get("target_scores") is not None for ex in examples)
    if mode == "multiple_choice" and not any_mc:
        raise TaskError(f"{path}: no example has 'target_scores', so the task has no multiple-choice form (mode: generate)")
    mc = mode == "multiple_choice" or (mode == "auto" and any_mc)
    items = [_bigbench_example(fmt, ex, mc, i, f"{path}: example {i}") for i, ex in enumerate(examples)]
    return [it for it in items if it is not None]
