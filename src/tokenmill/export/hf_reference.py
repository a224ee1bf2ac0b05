"""The reference path for generative and code tasks: an exported model (`tokenmill export hf`)
scored through Hugging Face transformers' `generate`, beside tokenmill's own scorer on the
checkpoint it came from, so "the exported model scores the same" is a check rather than a hope.

What the reference shares with tokenmill, and what it does not. It reads the same task files
(tokenmill's item loading and shot text, `prompt_prefix`: parsing is not what is compared) and
judges answers the same way (exact match through `generative.exact_match`, whose normalisation
is tested against lm-eval's documented examples; code through the sandbox). Everything between
is its own: the prompt ids are the HF tokenizer's ids of the prompt text, with the document-start
token the export's tokenizer prepends itself (so an export that does not is caught; special-token
strings in the text encoded as text, as tokenmill does), cut on the left to leave
`max_new_tokens` in the window; `model.generate(do_sample=False)` decodes one item
at a time (no padding, so no attention-mask arithmetic in the comparison); the new ids end at the
first EOS, are decoded by the HF tokenizer with special tokens skipped (as lm-eval's HF model
does), and the text is cut at the first stop string here, not by tokenmill's `cut_at_stop`.

Greedy only: a sampled answer depends on each implementation's random stream and filtering
order, so sampled generation cannot be compared across implementations; a task with
temperature > 0 is refused. transformers is imported lazily (a test/bench extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tokenmill.errors import UserError
from tokenmill.runs import RunDir
from tokenmill.eval.config import SandboxConfig, TaskConfig
from tokenmill.eval.items import GenItem
from tokenmill.eval.tasks import _scored_form, code_summary, load_task, prompt_prefix

# What `tokenmill eval --reference-hf` compares when the run's config has no generative task: the
# two sets that ship with tokenmill, asked as the demo config asks them.
SHIPPED_TASKS = (
    TaskConfig(
        name="quiz_qa",
        path="package:tasks/quiz_qa.jsonl",
        format="jsonl",
        shots=2,
        generation={"max_new_tokens": 16, "stop": ["\n"]},
    ),
    TaskConfig(
        name="python_code",
        path="package:tasks/python_code.jsonl",
        format="jsonl",
        generation={"max_new_tokens": 64, "stop": ["\ndef ", "\nclass ", "\nif __name__", "\nprint("]},
    ),
)


class ReferenceError(UserError):
    """The export cannot be loaded, or a task cannot be compared (sampled, or not generative)."""


@dataclass
class Reference:
    """An exported directory loaded by transformers."""

    model: Any
    tokenizer: Any
    eos_id: int
    pad_id: int
    window: int  # config.json's max_position_embeddings


def load_reference(export_dir: Path) -> Reference:
    """The HF model (fp32, eval mode) and tokenizer of `export_dir`, from local files only."""
    try:
        import transformers
    except ImportError as exc:
        raise ReferenceError("the HF reference needs transformers: pip install 'tokenmill[test]'") from exc
    if not (export_dir / "config.json").is_file():
        raise ReferenceError(f"{export_dir}: no config.json; write an export with `tokenmill export hf CHECKPOINT {export_dir}`")
    transformers.utils.logging.disable_progress_bar()  # the caller's output is the comparison table
    model = transformers.AutoModelForCausalLM.from_pretrained(export_dir, local_files_only=True, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(export_dir, local_files_only=True)
    if tok.eos_token_id is None:
        raise ReferenceError(f"{export_dir}: the tokenizer names no eos_token")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return Reference(model.eval(), tok, int(tok.eos_token_id), int(pad), int(model.config.max_position_embeddings))


def _cut(text: str, stops: list[str]) -> str:
    """`text` before the earliest occurrence of any (non-empty) stop string."""
    ends = [text.find(s) for s in stops if s]
    return text[: min((e for e in ends if e >= 0), default=len(text))]


@torch.no_grad()
def reference_answer(ref: Reference, text: str, cfg: TaskConfig, window: int) -> str:
    """The greedy answer to prompt `text` (its ids, which the export's tokenizer starts with EOS, left-cut
    to window - max_new_tokens)."""
    room = window - cfg.generation.max_new_tokens
    if room < 1:
        raise ReferenceError(
            f"task {cfg.name!r}: max_new_tokens={cfg.generation.max_new_tokens} leaves no room in a {window}-token window"
        )
    # The tokenizer's own special tokens: an export prepends the EOS every tokenmill prompt starts with.
    # split_special_tokens: "<|endoftext|>" written in a prompt is text, as tokenmill encodes it
    enc = ref.tokenizer(text, split_special_tokens=True)
    ids = enc["input_ids"][-room:]
    inp = torch.tensor([ids], dtype=torch.long)
    out = ref.model.generate(
        input_ids=inp,
        attention_mask=torch.ones_like(inp),
        do_sample=False,
        num_beams=1,
        max_new_tokens=cfg.generation.max_new_tokens,
        eos_token_id=ref.eos_id,
        pad_token_id=ref.pad_id,
        temperature=None,
        top_p=None,
        top_k=None,
    )
    new = out[0, len(ids) :].tolist()
    if ref.eos_id in new:
        new = new[: new.index(ref.eos_id)]
    return _cut(ref.tokenizer.decode(new, skip_special_tokens=True), cfg.generation.stop)


def reference_score(
    ref: Reference, cfg: TaskConfig, window: int | None = None, sandbox: SandboxConfig | None = None
) -> dict[str, Any]:
    """The task scored through HF generate, in score_task's shape for generative items
    {"name", "n", "acc", "exact_match", "outputs": [{line, output, match}]} or code items
    {"name", "n", "acc", "pass@k"..., "outputs": [{line, passed, samples, verdicts}]}."""
    if cfg.generation.temperature > 0:
        raise ReferenceError(
            f"task {cfg.name!r}: temperature {cfg.generation.temperature}: only greedy generation "
            "(temperature 0) can be compared across implementations"
        )
    loaded = load_task(cfg)
    form = _scored_form(cfg, loaded)
    if form == "choices":
        raise ReferenceError(f"task {cfg.name!r} is scored by log-likelihood, not generation: nothing to compare")
    items = [
        it if isinstance(it, GenItem) else GenItem(it.contexts[it.gold], [it.continuations[it.gold]], it.line) for it in loaded
    ]
    n = len(items) if cfg.limit is None else min(cfg.limit, len(items))
    win = window or ref.window
    answers = [reference_answer(ref, prompt_prefix(items, i, cfg.shots) + items[i].prompt, cfg, win) for i in range(n)]
    if form == "code":  # greedy: every sample is the one answer
        return code_summary(cfg, items, [[a] * cfg.generation.samples for a in answers], sandbox)
    from tokenmill.eval.generative import exact_match

    matches = [exact_match(a, items[i].answers, cfg.exact_match) for i, a in enumerate(answers)]
    em = sum(matches) / n
    outputs = [{"line": items[i].line, "output": a, "match": m} for i, (a, m) in enumerate(zip(answers, matches))]
    return {"name": cfg.name, "format": cfg.format, "shots": cfg.shots, "n": n, "acc": em, "exact_match": em, "outputs": outputs}


# --------------------------------------------------------------------------- comparison
def _answer(row: dict[str, Any]) -> str:
    return row["output"] if "output" in row else row["samples"][0]


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in result.items() if k in ("acc", "exact_match") or k.startswith("pass@")}


def first_difference(tokenizer: Any, a: str, b: str) -> int:
    """The index of the first token where the encodings of answers `a` and `b` differ."""
    x, y = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (a, b))
    return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))


def compare(ours: dict[str, Any], theirs: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """{"name", "n", "nonempty", "distinct", "tokenmill": metrics, "reference": metrics, "differing": [{line, token,
    tokenmill, reference}], "agree"}: item by item answers (the first differing token by the
    tokenizer's encoding of both answers) and the task's numbers, which must be equal."""
    differing = [
        {
            "line": a["line"],
            "token": first_difference(tokenizer, _answer(a), _answer(b)),
            "tokenmill": _answer(a),
            "reference": _answer(b),
        }
        for a, b in zip(ours["outputs"], theirs["outputs"])
        if _answer(a) != _answer(b)
    ]
    mine, ref = _metrics(ours), _metrics(theirs)
    agree = not differing and mine == ref and ours["n"] == theirs["n"]
    answers = [_answer(a) for a in ours["outputs"]]  # how much was compared: not all empty, not all one string
    return {
        "name": ours["name"],
        "n": ours["n"],
        "nonempty": sum(a != "" for a in answers),
        "distinct": len(set(answers)),
        "tokenmill": mine,
        "reference": ref,
        "differing": differing,
        "agree": agree,
    }


def comparison_lines(rows: list[dict[str, Any]], show: int = 5) -> list[str]:
    """A plain-text table (task, items, each metric for both paths, differing items), then up to
    `show` differing items per task with their answers."""
    lines = ["task            items  metric        tokenmill  HF reference  differing items"]
    for r in rows:
        for k in r["tokenmill"]:
            a, b = r["tokenmill"][k], r["reference"].get(k, float("nan"))
            lines.append(f"{r['name']:<15} {r['n']:>5}  {k:<12} {a:>10.4f} {b:>13.4f}  {len(r['differing'])}")
    for r in rows:
        for d in r["differing"][:show]:
            lines.append(f"{r['name']} line {d['line']}: first differing token {d['token']}")
            lines.append(f"  tokenmill: {d['tokenmill'][:120]!r}\n  reference: {d['reference'][:120]!r}")
        if len(r["differing"]) > show:
            lines.append(f"{r['name']}: {len(r['differing']) - show} more differing items")
    return lines


def export_step(export_dir: Path) -> int | None:
    """The training step `tokenmill export hf` recorded in the weights' metadata (None: not recorded)."""
    from safetensors import safe_open

    if not (export_dir / "model.safetensors").is_file():
        raise ReferenceError(
            f"{export_dir}: no model.safetensors; write an export with `tokenmill export hf CHECKPOINT {export_dir}`"
        )
    with safe_open(str(export_dir / "model.safetensors"), framework="pt") as fh:
        step = (fh.metadata() or {}).get("tokenmill_step")
    return int(step) if step is not None and step.isdigit() else None


def run_tasks(run: RunDir) -> list[TaskConfig]:
    """The run's generative and code tasks (eval.tasks whose items are scored by generation); the
    two shipped sets (SHIPPED_TASKS) when it has none."""
    gen = [t for t in run.config.eval.tasks if _scored_form(t, load_task(t)) != "choices"]
    return gen or list(SHIPPED_TASKS)


def check_against_hf(
    run: RunDir, export_dir: Path, checkpoint: Path | None = None, tasks: list[TaskConfig] | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """`compare` of every task (default: `run_tasks`) scored by tokenmill on `checkpoint` (default:
    the newest valid) and by transformers on `export_dir`, both greedy on CPU in fp32, over the
    first `limit` items (default: each task's own limit), in tokenmill's window; each row also
    holds both paths' "seconds" (generation and scoring, the sandbox included)."""
    from tokenmill.eval.tasks import score_task
    from tokenmill.tokenizer.bpe import load_tokenizer
    from tokenmill.tokens.store import TokenStore
    from tokenmill.train.restore import load_model

    model, step = load_model(checkpoint or run.sub("checkpoints"), "cpu")
    exported = export_step(export_dir)
    if exported is not None and exported != step:
        raise ReferenceError(f"{export_dir}: an export of step {exported}, the checkpoint compared is step {step}")
    ref = load_reference(export_dir)
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    store = TokenStore(run.sub("tokens"))
    if (store.eos_id, store.pad_id) != (ref.eos_id, ref.pad_id):
        raise ReferenceError(
            f"{export_dir}: eos/pad ids {ref.eos_id}/{ref.pad_id}, the run's are {store.eos_id}/{store.pad_id}: not this run's export"
        )
    window = min(run.config.train.seq_len, model.config.max_seq_len)
    rows = []
    for t in tasks if tasks is not None else run_tasks(run):
        cfg = t if limit is None else t.model_copy(update={"limit": limit})
        sandbox = run.config.eval.sandbox
        t0 = time.perf_counter()
        theirs = reference_score(ref, cfg, window, sandbox)  # first: refuses sampled tasks before any work
        t1 = time.perf_counter()
        ours = score_task(
            model, tok, cfg, torch.device("cpu"), run.config.eval.batch_size, window, store.eos_id, store.pad_id, sandbox
        )
        row = compare(ours, theirs, ref.tokenizer)
        row["seconds"] = {"tokenmill": round(time.perf_counter() - t1, 2), "reference": round(t1 - t0, 2)}
        rows.append(row)
    return rows
