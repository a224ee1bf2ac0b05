"""Downstream tasks read from local JSONL files in the public layouts (hellaswag, arc, piqa,
winogrande, lambada; MMLU and BIG-bench task.json in eval/layouts.py), scored by log-likelihood
with lm-evaluation-harness's metric definitions (0.4.x, `ConfigurableTask.process_results`).

Every item becomes one or more (context, continuation) requests; a request's score is the summed
log-probability of the continuation's tokens given the context.

* Multiple choice (hellaswag, arc, piqa, winogrande): `acc` picks the choice with the highest
  log-likelihood; `acc_norm` the highest log-likelihood per character of the choice, `acc_bytes`
  per UTF-8 byte of it, where the choice is lm-eval's `doc_to_choice` string: the answer without
  the target delimiter (the leading space the scored continuation carries), and for winogrande
  the filled-in context (`Item.choices`). Ties go to the first choice, as numpy's argmax.
  Each item's log-likelihoods, gold index and picks are kept in the result's `items`, so a score
  can be compared with lm-eval's item by item.
* winogrande is scored partially (lm-eval's way): the context is the sentence up to the blank with
  each option filled in, the continuation (the rest of the sentence) is the same for both options.
* lambada: the context is the text up to its last word, the continuation " <last word>". `acc`:
  greedy decoding (argmax at every continuation position) reproduces the target tokens; also the
  mean over items of the target's summed log-likelihood (`mean_logprob`); per item both, in `items`.

Prompts. Every prompt starts at EOS (as after a previous document in training, the same as the
held-out perplexity; an export's tokenizer prepends the same token, export/hf.py). With
`shots` > 0, that many solved examples (context + correct continuation) are taken from the
*other* items of the file, chosen by `random.Random(item index)` and joined by blank lines
before the item's context (lm-eval draws its shots from the task's few-shot split instead).

Tokenization and the context/continuation boundary. Context and continuation are encoded
separately (without special tokens) and their ids concatenated, so the scored tokens are exactly
the continuation's own encoding whatever BPE would merge across the boundary. lm-eval's HF model
encodes context + continuation together and splits at the context's length: the same ids
whenever the pre-tokenizer splits at the boundary (a continuation starting with a space after a
non-space, as in every layout here), not otherwise (docs/evaluation.md). Inputs longer than
the model's window keep their last `max_seq_len + 1` tokens (the context is cut on the left); a
continuation that alone does not fit is a UserError.

Batching. Requests are padded on the right and every row is scored on its own length; the model
runs in eval mode and the log-softmax is taken in fp32 (no autocast), so batch size only changes
which rows share a forward pass.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from tokenmill.eval.config import EvalConfig, SandboxConfig, TaskConfig
from tokenmill.data.jsonl import bounded_lines, json_objects
from tokenmill.eval.layouts import load_bigbench, load_mmlu_csv, mmlu_record
from tokenmill.eval.items import GenItem, Item, TaskError, index_field, need, str_field, str_list

MULTIPLE_CHOICE = ("hellaswag", "arc", "piqa", "winogrande")


@dataclass
class ItemScore:
    """Per choice: summed log-likelihood of the continuation, the length of the choice in characters
    and in UTF-8 bytes (`Item.choice_texts`), and whether greedy decoding reproduces it."""

    logprobs: list[float] = field(default_factory=list)
    n_chars: list[int] = field(default_factory=list)
    n_bytes: list[int] = field(default_factory=list)
    greedy: list[bool] = field(default_factory=list)
    gold: int = 0


# --------------------------------------------------------------------------- parsing
def _hellaswag_text(text: str) -> str:
    """lm-eval's hellaswag preprocessing (WikiHow artifacts such as " [title]", "[header]")."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ").strip()


def _hellaswag(rec: dict, where: str) -> Item:
    if "ctx_a" in rec:
        ctx = str_field(rec, "ctx_a", where) + " " + str_field(rec, "ctx_b", where).capitalize()
    else:
        ctx = str_field(rec, "ctx", where)
    if isinstance(rec.get("activity_label"), str) and rec["activity_label"]:
        ctx = rec["activity_label"] + ": " + ctx
    endings = need(rec, "endings", where)
    if not isinstance(endings, list) or len(endings) < 2 or not all(isinstance(e, str) for e in endings):
        raise TaskError(f"{where}: field 'endings' must be a list of at least 2 strings")
    gold = index_field(need(rec, "label", where), len(endings), "label", where)
    ctx = _hellaswag_text(ctx)
    return Item([ctx] * len(endings), [" " + _hellaswag_text(e) for e in endings], gold, 0)


def _arc(rec: dict, where: str) -> Item:
    q = need(rec, "question", where)
    if isinstance(q, dict):  # the original ARC layout: question = {stem, choices: [{text, label}]}
        stem = str_field(q, "stem", where + " (question)")
        choices = need(q, "choices", where + " (question)")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise TaskError(f"{where}: field 'question.choices' must be a list of {{text, label}} objects")
        texts = [str_field(c, "text", where + " (question.choices)") for c in choices]
        labels = [str(need(c, "label", where + " (question.choices)")) for c in choices]
    elif isinstance(q, str):  # the Hugging Face layout: question, choices = {text: [...], label: [...]}
        stem = q
        choices = need(rec, "choices", where)
        if not isinstance(choices, dict):
            raise TaskError(f"{where}: field 'choices' must be an object {{text: [...], label: [...]}}")
        texts, labels = need(choices, "text", where + " (choices)"), need(choices, "label", where + " (choices)")
        if not isinstance(texts, list) or not isinstance(labels, list) or len(texts) != len(labels):
            raise TaskError(f"{where}: 'choices.text' and 'choices.label' must be lists of the same length")
        labels = [str(x) for x in labels]
    else:
        raise TaskError(f"{where}: field 'question' must be a string or an object with 'stem'")
    if len(texts) < 2:
        raise TaskError(f"{where}: an ARC item needs at least 2 choices")
    key = str(need(rec, "answerKey", where))
    if key not in labels:
        raise TaskError(f"{where}: answerKey {key!r} is not one of the choice labels {labels}")
    ctx = f"Question: {stem}\nAnswer:"
    return Item([ctx] * len(texts), [" " + str(t) for t in texts], labels.index(key), 0)


def _piqa(rec: dict, where: str) -> Item:
    ctx = f"Question: {str_field(rec, 'goal', where)}\nAnswer:"
    sols = [str_field(rec, "sol1", where), str_field(rec, "sol2", where)]
    gold = index_field(need(rec, "label", where), 2, "label", where)
    return Item([ctx, ctx], [" " + s for s in sols], gold, 0)


def _winogrande(rec: dict, where: str) -> Item:
    sentence = str_field(rec, "sentence", where)
    if "_" not in sentence:
        raise TaskError(f"{where}: field 'sentence' has no blank '_'")
    options = [str_field(rec, "option1", where), str_field(rec, "option2", where)]
    answer = str(need(rec, "answer", where))
    if answer not in ("1", "2"):
        raise TaskError(f'{where}: field \'answer\' must be "1" or "2", got {answer!r}')
    cut = sentence.index("_")
    rest = " " + sentence[cut + 1 :].strip()
    filled = [sentence[:cut] + o for o in options]
    return Item(filled, [rest, rest], int(answer) - 1, 0, choices=filled)


def _lambada(rec: dict, where: str) -> Item:
    text = str_field(rec, "text", where).strip()
    if " " not in text:
        raise TaskError(f"{where}: field 'text' needs a context and a last word separated by a space")
    ctx, word = text.rsplit(" ", 1)
    return Item([ctx], [" " + word], 0, 0)


def _jsonl(rec: dict, where: str) -> Item | GenItem:
    """tokenmill's generic layout, one of three item kinds by its fields:
    multiple choice {"prompt", "choices": [...], "answer": index}, generative {"prompt", "answer":
    string or list of accepted strings}, code {"prompt", "tests", "solution"}."""
    prompt = str_field(rec, "prompt", where)
    if "choices" in rec:
        choices = str_list(rec, "choices", where)
        if len(choices) < 2:
            raise TaskError(f"{where}: field 'choices' needs at least 2 strings")
        gold = index_field(need(rec, "answer", where), len(choices), "answer", where)
        return Item([prompt] * len(choices), [" " + c.lstrip() for c in choices], gold, 0)
    if "tests" in rec:
        return GenItem(prompt, [], 0, tests=str_field(rec, "tests", where), solution=str_field(rec, "solution", where))
    return GenItem(prompt, str_list(rec, "answer", where), 0)


PARSERS: dict[str, Callable[[dict, str], Item | GenItem]] = {
    "hellaswag": _hellaswag,
    "arc": _arc,
    "piqa": _piqa,
    "winogrande": _winogrande,
    "lambada": _lambada,
    "jsonl": _jsonl,
    "mmlu": mmlu_record,
}


PACKAGE_PREFIX = "package:"


def task_path(spec: str) -> Path:
    """A task file: a path, or `package:tasks/NAME.jsonl` for the small task files that ship with
    tokenmill (under tokenmill/configs/, used by the demo)."""
    if spec.startswith(PACKAGE_PREFIX):
        from importlib import resources

        return Path(str(resources.files("tokenmill") / "configs" / spec[len(PACKAGE_PREFIX) :]))
    return Path(spec)


def _read_items(path: Path, cfg: TaskConfig) -> list[Item | GenItem]:
    """BIG-bench task.json and MMLU CSV are read whole (the file is no larger than cfg.max_bytes);
    every other layout is JSONL, one item a line, each at most cfg.max_line_bytes."""
    if cfg.format == "bigbench":
        return load_bigbench(path, cfg.mode)
    if cfg.format == "mmlu" and path.suffix.lower() == ".csv":
        return [*load_mmlu_csv(path)]
    parse = PARSERS[cfg.format]
    items: list[Item | GenItem] = []
    with path.open("rb") as f:
        lines = bounded_lines(f, path, cfg.max_line_bytes, TaskError, f"task {cfg.name!r}: eval.tasks[].max_line_bytes")
        for n, rec in json_objects(lines, path, TaskError):
            item = parse(rec, f"{path}:{n} ({cfg.format})")
            item.line = n
            items.append(item)
    return items


def check_task_file(cfg: TaskConfig) -> Path:
    """The task's file, once it is known to exist and to be under its size cap (checked before a
    byte is read: every item of a task is held in memory)."""
    path = task_path(cfg.path)
    if not path.is_file():
        raise TaskError(f"{path}: eval.tasks {cfg.name!r}: no such file")
    size = path.stat().st_size
    if size > cfg.max_bytes:
        raise TaskError(
            f"{path}: task {cfg.name!r} is {size:,} bytes, over the {cfg.max_bytes:,}-byte cap "
            "(raise eval.tasks[].max_bytes to read it)"
        )
    return path


def check_eval_files(cfg: EvalConfig) -> None:
    """Every task and probe file the evaluation reads is there: checked before training, so a typo
    in a path costs one line before the run starts, not after it trained."""
    for task in cfg.tasks:
        check_task_file(task)
    for probe in cfg.probes:
        if not task_path(probe.path).is_file():
            raise TaskError(f"{task_path(probe.path)}: eval.probes {probe.name!r}: no such file")


def load_task(cfg: TaskConfig) -> list[Item | GenItem]:
    """Every item of the task file (not limited by `cfg.limit`: shots may come from any item)."""
    path = check_task_file(cfg)
    items = _read_items(path, cfg)
    if not items:
        raise TaskError(f"{path}: task {cfg.name!r} has no items")
    if cfg.shots > len(items) - 1:
        raise TaskError(
            f"{path}: task {cfg.name!r}: shots={cfg.shots} needs at least {cfg.shots + 1} items, the file has {len(items)}"
        )
    return items


# --------------------------------------------------------------------------- prompts
def shot_indices(index: int, n_items: int, shots: int) -> list[int]:
    """`shots` distinct items other than `index`, chosen by random.Random(index)."""
    picks = random.Random(index).sample(range(n_items - 1), shots)
    return [j if j < index else j + 1 for j in picks]


def prompt_prefix(items: Sequence[Item | GenItem], index: int, shots: int) -> str:
    """What precedes item `index`'s context: its task header (MMLU's subject line, BIG-bench's
    task_prefix; "" for most layouts) once, then the solved examples, each followed by the item's
    shot separator ("" for a zero-shot item without header)."""
    item = items[index]
    if shots == 0:
        return item.header
    return item.header + "".join(items[j].solved() + item.shot_separator for j in shot_indices(index, len(items), shots))


def encode_request(
    tokenizer: Any, eos_id: int, context: str, continuation: str, max_seq_len: int, where: str = ""
) -> tuple[list[int], int]:
    """[EOS] + ids(context) + ids(continuation), encoded separately, left-truncated to at most
    max_seq_len + 1 tokens; returns (ids, number of continuation tokens at the end)."""
    ctx = [eos_id] + tokenizer.encode(context, add_special_tokens=False).ids
    cont = tokenizer.encode(continuation, add_special_tokens=False).ids
    if not cont:
        raise TaskError(f"{where}: empty continuation {continuation!r}")
    if len(cont) > max_seq_len:
        raise TaskError(f"{where}: the continuation is {len(cont)} tokens, longer than the model's {max_seq_len}-token window")
    ids = (ctx + cont)[-(max_seq_len + 1) :]
    return ids, len(cont)


# --------------------------------------------------------------------------- scoring
@torch.no_grad()
def score_requests(
    model: torch.nn.Module, requests: list[tuple[list[int], int]], device: torch.device, batch_size: int, pad_id: int = 0
) -> list[tuple[float, bool]]:
    """(summed log-prob of the continuation, greedy match) for each (ids, n_cont) request.

    Rows are padded on the right (causal attention: padding after a row cannot change it) and
    batched longest first; log-softmax in fp32."""
    out: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i][0]))
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), max(1, batch_size)):
            rows = order[start : start + max(1, batch_size)]
            width = max(len(requests[i][0]) for i in rows) - 1
            inp = torch.full((len(rows), width), pad_id, dtype=torch.long)
            for r, i in enumerate(rows):
                ids = requests[i][0]
                inp[r, : len(ids) - 1] = torch.tensor(ids[:-1], dtype=torch.long)
            logp = torch.log_softmax(model(inp.to(device)).float(), dim=-1).cpu()
            for r, i in enumerate(rows):
                ids, n_cont = requests[i]
                t = len(ids) - 1
                lp = logp[r, t - n_cont : t]  # the positions that predict the continuation
                target = torch.tensor(ids[-n_cont:], dtype=torch.long)
                ll = float(lp.gather(1, target[:, None]).sum())
                out[i] = (ll, bool((lp.argmax(-1) == target).all()))
    finally:
        model.train(was_training)
    return out


def item_scores(
    model: torch.nn.Module,
    tokenizer: Any,
    cfg: TaskConfig,
    items: list[Item],
    device: torch.device,
    batch_size: int,
    max_seq_len: int,
    eos_id: int = 0,
    pad_id: int = 0,
) -> list[ItemScore]:
    """Scores of the first `cfg.limit` items (all when None), each prompted with `cfg.shots` shots."""
    n = len(items) if cfg.limit is None else min(cfg.limit, len(items))
    requests, owner = [], []
    for i in range(n):
        prefix = prompt_prefix(items, i, cfg.shots)
        for c, (ctx, cont) in enumerate(zip(items[i].contexts, items[i].continuations)):
            where = f"{cfg.path}:{items[i].line}"
            requests.append(encode_request(tokenizer, eos_id, prefix + ctx, cont, max_seq_len, where))
            owner.append(i)
    results = score_requests(model, requests, device, batch_size, pad_id)
    scores = [ItemScore(gold=items[i].gold) for i in range(n)]
    k = 0
    for i in range(n):
        for choice in items[i].choice_texts():
            ll, greedy = results[k]
            scores[i].logprobs.append(ll)
            scores[i].n_chars.append(len(choice))
            scores[i].n_bytes.append(len(choice.encode("utf-8")))
            scores[i].greedy.append(greedy)
            k += 1
    return scores


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda j: (values[j], -j))  # first of ties


def _per_length(logprobs: list[float], lengths: list[int]) -> list[float]:
    return [lp / max(n, 1) for lp, n in zip(logprobs, lengths)]  # an empty choice counts as 1 (lm-eval would divide by 0)


def summarize(cfg: TaskConfig, scores: list[ItemScore], lines: list[int] | None = None) -> dict[str, Any]:
    """The task's figures and, in `items`, each item's: its line in the file (`lines`, default
    1, 2, ...), the per-choice log-likelihoods and lengths (characters, UTF-8 bytes), the gold
    index and the picks of acc, acc_norm and acc_bytes (lambada: the target's log-likelihood and
    whether greedy decoding reproduces it).
    `items` is bounded by the task: at most one short record per item scored (`limit`), far
    smaller than the item's own text, which the file's `max_bytes` caps."""
    n = len(scores)
    lines = lines if lines is not None else list(range(1, n + 1))
    out: dict[str, Any] = {"name": cfg.name, "format": cfg.format, "shots": cfg.shots, "n": n}
    if cfg.format == "lambada":
        out["acc"] = sum(s.greedy[0] for s in scores) / n
        out["mean_logprob"] = sum(s.logprobs[0] for s in scores) / n
        out["items"] = [{"line": ln, "logprob": s.logprobs[0], "greedy": s.greedy[0]} for ln, s in zip(lines, scores)]
        return out
    rows = [
        {
            "line": ln,
            "gold": s.gold,
            "logprobs": s.logprobs,
            "chars": s.n_chars,
            "bytes": s.n_bytes,
            "pick": _argmax(s.logprobs),
            "pick_norm": _argmax(_per_length(s.logprobs, s.n_chars)),
            "pick_bytes": _argmax(_per_length(s.logprobs, s.n_bytes)),
        }
        for ln, s in zip(lines, scores)
    ]
    for metric, key in (("acc", "pick"), ("acc_norm", "pick_norm"), ("acc_bytes", "pick_bytes")):
        out[metric] = sum(r[key] == r["gold"] for r in rows) / n
    out["items"] = rows
    return out


def generate_answers(
    model: torch.nn.Module,
    tokenizer: Any,
    cfg: TaskConfig,
    items: list[GenItem],
    device: torch.device,
    max_seq_len: int,
    eos_id: int = 0,
    pad_id: int = 0,
    batch_size: int = 16,
) -> list[list[str]]:
    """`cfg.generation.samples` completions for each of the first `cfg.limit` items (all when
    None), each cut at its first stop string (eval/generative.py). The prompt is [EOS] + shots +
    the item's prompt, cut on the left to leave room for max_new_tokens in the window. `pad_id`
    is unused: rows are batched by prompt length, never padded."""
    from tokenmill.eval.generative import generate_texts

    n = len(items) if cfg.limit is None else min(cfg.limit, len(items))
    room = max_seq_len - cfg.generation.max_new_tokens
    if room < 1:
        raise TaskError(
            f"{cfg.path}: task {cfg.name!r}: generation.max_new_tokens={cfg.generation.max_new_tokens} "
            f"leaves no room for a prompt in the model's {max_seq_len}-token window"
        )
    prompts = []
    for i in range(n):
        text = prompt_prefix(items, i, cfg.shots) + items[i].prompt
        prompts.append(([eos_id] + tokenizer.encode(text, add_special_tokens=False).ids)[-room:])
    return generate_texts(model, tokenizer, prompts, cfg.generation, device, max_seq_len, eos_id, batch_size)


def code_summary(
    cfg: TaskConfig, items: list[GenItem], answers: list[list[str]], sandbox: SandboxConfig | None
) -> dict[str, Any]:
    """pass@k of the generated completions of the first len(answers) items, run in the sandbox,
    with each item's completions and verdicts (status, refusal rule) so a user can read them."""
    from tokenmill.eval.sandbox import score_code_items

    res = score_code_items(items[: len(answers)], answers, cfg, sandbox)
    ks = sorted(cfg.generation.pass_k)
    out: dict[str, Any] = {"name": cfg.name, "format": cfg.format, "shots": cfg.shots, "n": len(answers)}
    out["acc"] = res[f"pass@{ks[0]}"]
    out |= {f"pass@{k}": res[f"pass@{k}"] for k in ks}
    out["outputs"] = [
        {
            "line": row["line"],
            "passed": row["passed"],
            "samples": texts,
            "verdicts": [{"status": v["status"], "rule": v.get("rule")} for v in row["verdicts"]],
        }
        for row, texts in zip(res["items"], answers)
    ]
    return out


def _kind(item: Item | GenItem) -> str:
    if isinstance(item, Item):
        return "choices"
    return "exact" if item.tests is None else "code"


def _scored_form(cfg: TaskConfig, items: list[Item | GenItem]) -> str:
    """One of "choices", "exact", "code": how the file's items are scored under cfg.mode; a file that
    mixes kinds, or a mode its items cannot take, is one TaskError naming the file."""
    path = task_path(cfg.path)
    first: dict[str, int] = {}
    for it in items:
        first.setdefault(_kind(it), it.line)
    if len(first) > 1:
        kinds = ", ".join(f"{k} from line {line}" for k, line in sorted(first.items(), key=lambda kv: kv[1]))
        raise TaskError(f"{path}: task {cfg.name!r} mixes item kinds ({kinds})")
    (kind,) = first
    if cfg.mode == "multiple_choice" and kind != "choices":
        raise TaskError(f"{path}: task {cfg.name!r}: mode multiple_choice, but its items are generative (no choices)")
    if cfg.mode == "generate" and kind == "choices":
        return "exact"  # asked generatively: exact match against the gold choice's text
    return kind


def score_task(
    model: torch.nn.Module,
    tokenizer: Any,
    cfg: TaskConfig,
    device: torch.device,
    batch_size: int,
    max_seq_len: int,
    eos_id: int = 0,
    pad_id: int = 0,
    sandbox: SandboxConfig | None = None,
) -> dict[str, Any]:
    """{"name", "format", "shots", "n", "acc", "acc_norm", "acc_bytes", "items"} (multiple choice),
    {"name", "format", "shots", "n", "acc", "mean_logprob", "items"} (lambada), or for generative items
    {"name", "format", "shots", "n", "acc", "exact_match", ["exact_match_mean"], "outputs"}
    (eval/generative.py; acc = exact_match), or for code items {"name", "format", "shots", "n",
    "acc", "pass@k" for each k, "outputs"} (acc = pass@ the smallest k; each completion run by
    eval/sandbox.py under `sandbox`, default limits when None).

    `tokenizer`: the run's `tokenizers.Tokenizer`; `max_seq_len`: the model's window;
    `eos_id`: the token every prompt starts with; `pad_id`: right padding (never scored)."""
    loaded = load_task(cfg)
    form = _scored_form(cfg, loaded)
    if form == "code":
        code_items = [it for it in loaded if isinstance(it, GenItem)]
        answers = generate_answers(model, tokenizer, cfg, code_items, device, max_seq_len, eos_id, pad_id, batch_size)
        return code_summary(cfg, code_items, answers, sandbox)
    if form == "exact":
        from tokenmill.eval.generative import exact_match_summary

        gen_items = [
            it if isinstance(it, GenItem) else GenItem(it.contexts[it.gold], [it.continuations[it.gold]], it.line)
            for it in loaded
        ]
        answers = generate_answers(model, tokenizer, cfg, gen_items, device, max_seq_len, eos_id, pad_id, batch_size)
        return exact_match_summary(cfg, gen_items, answers)
    items = [it for it in loaded if isinstance(it, Item)]
    scores = item_scores(model, tokenizer, cfg, items, device, batch_size, max_seq_len, eos_id, pad_id)
    return summarize(cfg, scores, [it.line for it in items[: len(scores)]])
