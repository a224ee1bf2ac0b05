"""Generative tasks: the model writes an answer, scored by exact match against accepted answers.

Prompts (built by `tasks.generate_answers`). [EOS] + shots + the item's prompt, the shots as for
log-likelihood tasks (`prompt_prefix`: solved examples, prompt + first accepted answer verbatim,
from the other items, joined by blank lines), cut on the left so the prompt and `max_new_tokens`
fit the model's window.

Generation. Prompts of one token length are decoded together through the KV cache
(`generate_batch`). A row ends at EOS, at `max_new_tokens`, or as soon as its decoded text holds
one of the `stop` strings; the answer is the text before the first stop string. temperature 0 is
greedy; otherwise sample s of item i draws from its own generator, seeded from (seed + i, s), so
an answer does not depend on which other items share its batch or how large the batch is.

Exact match, as lm-evaluation-harness's `exact_match` metric (its HF-evaluate implementation):
whitespace stripped (the remove_whitespace filter), then `regexes_to_ignore` removed, then
lowercasing, ASCII punctuation and digits removed as configured; two strings that normalise to
nothing match only when they were identical. An answer matches an item when it matches any of
its accepted answers (lm-eval's rule for a list of gold answers). `exact_match` is the share of
items whose first answer matches; with samples > 1, `exact_match_mean` is the share over all
samples.
"""

from __future__ import annotations

import re
import string
from typing import Any, Protocol, Sequence

import torch

from tokenmill.eval.config import ExactMatchConfig, GenerationConfig, TaskConfig
from tokenmill.eval.generate import generate_batch

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DIGITS = str.maketrans("", "", string.digits)


# --------------------------------------------------------------------------- exact match
def normalize(text: str, cfg: ExactMatchConfig) -> str:
    """`text` as exact match compares it (the order lm-eval applies the options in)."""
    if cfg.strip:
        text = text.strip()
    for rx in cfg.regexes_to_ignore:
        text = re.sub(rx, "", text)
    if cfg.ignore_case:
        text = text.lower()
    if cfg.ignore_punctuation:
        text = text.translate(_PUNCTUATION)
    if cfg.ignore_numbers:
        text = text.translate(_DIGITS)
    return text


def exact_match(prediction: str, references: list[str], cfg: ExactMatchConfig) -> bool:
    """Whether `prediction` equals any reference after normalisation; strings that normalise to
    "" match only when identical before (so an empty answer does not match "?")."""
    p = normalize(prediction, cfg)
    return any(p == normalize(r, cfg) and (p != "" or prediction == r) for r in references)


# --------------------------------------------------------------------------- generation
def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """(text before the earliest occurrence of any stop string, whether one occurred)."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def _generator(seed: int, index: int, sample: int) -> torch.Generator:
    """Item `index`'s sample `sample`: its own stream, whatever else is in the batch."""
    return torch.Generator().manual_seed((seed + index) * 1_000_003 + sample)


def _decode(tokenizer: Any, ids: list[int], eos_id: int, stops: list[str]) -> str:
    if ids and ids[-1] == eos_id:
        ids = ids[:-1]
    return cut_at_stop(tokenizer.decode(ids), stops)[0]


@torch.no_grad()
def generate_texts(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: list[list[int]],
    gen: GenerationConfig,
    device: torch.device,
    max_seq_len: int,
    eos_id: int,
    batch_size: int = 16,
) -> list[list[str]]:
    """`gen.samples` answers for every prompt (prompt i is item i, which seeds its samples), each
    cut at its first stop string; prompts of one length share a batch of at most batch_size rows."""
    # greedy decoding gives every sample the same answer: decode once, copy
    draws = gen.samples if gen.temperature > 0 else 1
    rows = [(i, s) for i in range(len(prompts)) for s in range(draws)]

    def stopped(ids: list[int]) -> bool:
        return cut_at_stop(tokenizer.decode(ids), gen.stop)[1]

    out: dict[tuple[int, int], list[int]] = {}
    was_training = model.training
    model.eval()
    try:
        for length in sorted({len(p) for p in prompts}):
            same = [r for r in rows if len(prompts[r[0]]) == length]
            for start in range(0, len(same), max(1, batch_size)):
                chunk = same[start : start + max(1, batch_size)]
                news = generate_batch(
                    model,
                    [prompts[i] for i, _ in chunk],
                    gen.max_new_tokens,
                    max_context=max_seq_len,
                    temperature=gen.temperature,
                    top_p=gen.top_p,
                    stop_id=eos_id,
                    generators=[_generator(gen.seed, i, s) for i, s in chunk],
                    device=device,
                    stop=stopped if gen.stop else None,
                )
                out.update(zip(chunk, news))
    finally:
        model.train(was_training)
    return [[_decode(tokenizer, out[(i, s % draws)], eos_id, gen.stop) for s in range(gen.samples)] for i in range(len(prompts))]


# --------------------------------------------------------------------------- scoring
class Answerable(Protocol):
    """What scoring reads of an item (tasks.GenItem): its prompt, accepted answers and file line."""

    prompt: str
    answers: list[str]
    line: int


def exact_match_summary(cfg: TaskConfig, items: Sequence[Answerable], answers: list[list[str]]) -> dict[str, Any]:
    """{"name", "format", "shots", "n", "acc" (= exact_match, the column every task table shows),
    "exact_match", ["exact_match_mean"], "outputs": per item {line, prompt, output, match}} for
    the generated `answers` of the first len(answers) items."""
    matches = [[exact_match(a, items[i].answers, cfg.exact_match) for a in texts] for i, texts in enumerate(answers)]
    n = len(answers)
    em = sum(m[0] for m in matches) / n
    out: dict[str, Any] = {"name": cfg.name, "format": cfg.format, "shots": cfg.shots, "n": n, "acc": em, "exact_match": em}
    if cfg.generation.samples > 1:
        out["exact_match_mean"] = sum(sum(m) for m in matches) / (n * cfg.generation.samples)
    outputs = []
    for i, texts in enumerate(answers):
        row: dict[str, Any] = {"line": items[i].line, "prompt": items[i].prompt, "output": texts[0], "match": matches[i][0]}
        if len(texts) > 1:
            row["samples"], row["sample_matches"] = texts, matches[i]
        outputs.append(row)
    out["outputs"] = outputs
    return out
