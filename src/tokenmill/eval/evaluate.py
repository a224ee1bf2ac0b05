"""The eval stage and the in-training evaluator: per-bucket scores, baseline, samples, files.

Every evaluation writes `eval/<step>.json` = {"step", "buckets": {b: {loss, ppl, bpb,
bpb_ci_low, bpb_ci_high, docs, tokens, unigram_bpb, ...}}, "samples": [...]} and an `eval` event with the same figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np
import torch

from tokenmill.data.canaries import load_canaries
from tokenmill.eval.canaries import canary_exposure
from tokenmill.eval.generate import generate_batch
from tokenmill.eval.perplexity import Score, doc_targets, doc_windows, interval_fields, windows_nll_each
from tokenmill.eval.probes import ProbeSet, load_probes, score_probes
from tokenmill.eval.progress_lines import bucket_lines
from tokenmill.eval.unigram import unigram_logprobs, unigram_nll
from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokens.store import TokenStore
from tokenmill.train.device import autocast, resolve_device, torch_threads

if TYPE_CHECKING:
    from tokenmill.model.config import ModelConfig


class Evaluator:
    """Scores a model on the first `max_docs` held-out documents of every bucket.

    The windows and the unigram baseline depend only on the store, so they are built once and
    reused by every evaluation of a run.
    """

    def __init__(self, store: TokenStore, seq_len: int, max_docs: int | None, batch_size: int):
        self.store, self.batch_size = store, batch_size
        self.windows: dict[str, list[np.ndarray]] = {}
        self.baseline: dict[str, Score] = {}
        self.counts: dict[str, Score] = {}
        # per bucket: the document each window belongs to, and each document's UTF-8 bytes, so the
        # windows' NLL sums back to one value per document for the interval (documents are its unit)
        self.owners: dict[str, np.ndarray] = {}
        self.doc_bytes: dict[str, np.ndarray] = {}
        for bucket in store.buckets:
            docs = store.docs(bucket, "val")[:max_docs]
            if not docs:
                continue
            logp = unigram_logprobs(store, bucket)
            tables: dict[Path, list[int]] = {}
            count, base, windows, owners = Score(), Score(), [], []
            for k, (shard, i) in enumerate(docs):
                n_bytes = tables.setdefault(shard.prefix, shard.doc_table().column("n_bytes").to_pylist())[i]
                doc = shard.doc(i)
                targets = doc_targets(doc)
                pieces = doc_windows(doc, seq_len, store.eos_id)
                windows += pieces
                owners += [k] * len(pieces)
                piece = Score(tokens=len(targets), bytes=n_bytes, docs=1)
                count.add(piece)
                base.add(Score(nll=unigram_nll(logp, targets), tokens=piece.tokens, bytes=n_bytes, docs=1))
            self.windows[bucket], self.counts[bucket], self.baseline[bucket] = windows, count, base
            self.owners[bucket] = np.asarray(owners, dtype=np.int64)
            self.doc_bytes[bucket] = np.asarray([tables[shard.prefix][i] for shard, i in docs], dtype=np.int64)

    def score(self, model: torch.nn.Module, device: torch.device, dtype: str = "auto") -> dict[str, dict]:
        """{bucket: {loss, ppl, bpb, bpb_ci_low, bpb_ci_high, bpb_ci_level, tokens, bytes, docs,
        unigram_loss, unigram_bpb}} for the model as it is now."""
        was_training = model.training
        model.eval()
        out: dict[str, dict] = {}
        try:
            with autocast(device, dtype):
                for bucket, windows in self.windows.items():
                    s = Score(tokens=self.counts[bucket].tokens, bytes=self.counts[bucket].bytes, docs=self.counts[bucket].docs)
                    each = windows_nll_each(model, windows, self.batch_size, device, self.store.pad_id)
                    doc_nll = np.bincount(self.owners[bucket], weights=each, minlength=s.docs)
                    s.nll = float(each.sum())
                    base = self.baseline[bucket].metrics()
                    out[bucket] = {
                        **s.metrics(),
                        **interval_fields(doc_nll, self.doc_bytes[bucket]),
                        "unigram_loss": base["loss"],
                        "unigram_bpb": base["bpb"],
                    }
        finally:
            model.train(was_training)
        return out


def write_eval(run: RunDir, step: int, buckets: dict[str, dict], **extra: Any) -> dict[str, Any]:
    record = {"step": step, "buckets": buckets, **extra}
    atomic_write_text(run.sub("eval", f"{step}.json"), json.dumps(record, indent=1))
    run.events.write("eval", "eval", step=step, buckets=buckets)
    return record


def sample_texts(run: RunDir, model: torch.nn.Module, store: TokenStore, device: torch.device) -> list[dict]:
    """Continuations of the first tokens of held-out documents, one bucket after another; prompts
    of one length are decoded together, sample k drawing from its own generator (run seed, k)."""
    cfg = run.config.eval
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    buckets = [b for b in store.buckets if store.docs(b, "val")]
    prompts: list[tuple[str, list[int]]] = []
    for k in range(cfg.num_samples if buckets else 0):
        bucket = buckets[k % len(buckets)]
        shard, i = store.docs(bucket, "val")[k // len(buckets) % len(store.docs(bucket, "val"))]
        prompts.append((bucket, [store.eos_id, *doc_targets(shard.doc(i))[: cfg.prompt_tokens].tolist()]))
    news: dict[int, list[int]] = {}
    was_training = model.training
    model.eval()
    try:
        for length in sorted({len(p) for _, p in prompts}):
            ks = [k for k, (_, p) in enumerate(prompts) if len(p) == length]
            gens = [torch.Generator().manual_seed(run.config.seed * 1_000_003 + k) for k in ks]
            with autocast(device, run.config.train.dtype):
                out = generate_batch(
                    model,
                    [prompts[k][1] for k in ks],
                    cfg.sample_tokens,
                    max_context=run.config.train.seq_len,
                    temperature=cfg.temperature,
                    top_k=cfg.top_k,
                    stop_id=store.eos_id,
                    generators=gens,
                    device=device,
                )
            news.update(zip(ks, out))
    finally:
        model.train(was_training)
    return [
        {"bucket": bucket, "prompt": tok.decode(p[1:]), "completion": tok.decode(news[k])}
        for k, (bucket, p) in enumerate(prompts)
    ]


def _probe_sets(run: RunDir, store: TokenStore) -> list[ProbeSet]:
    if not run.config.eval.probes:
        return []
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    return load_probes(run.config.eval.probes, tok, store.eos_id, run.config.train.seq_len)


class TaskScorer:
    """The run's tasks, each scored with its contamination beside it. Contamination compares the
    task texts with the training token store, which does not change during a run: it is computed
    once, at the first evaluation, and reused."""

    def __init__(self, run: RunDir, store: TokenStore):
        self.run, self.store = run, store
        self.tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json")) if run.config.eval.tasks else None
        self._contamination: dict[str, Any] | None = None

    def contamination(self) -> dict[str, Any]:
        from tokenmill.eval.contamination import contamination, flag, task_eval_sets

        if self._contamination is None:
            cfg = self.run.config.eval
            sets = contamination(self.store, task_eval_sets(cfg.tasks, self.tok), n=cfg.contamination_n)
            flagged = set(flag(sets, cfg.contamination_threshold))
            self._contamination = {name: {**v, "flagged": name in flagged, "n": cfg.contamination_n} for name, v in sets.items()}
            if cfg.semantic_contamination.enabled:
                for name, v in self.semantic().items():
                    self._contamination.setdefault(name, {})["semantic"] = v
        return self._contamination

    def semantic(self) -> dict[str, Any]:
        """The embedding back-check of every task's solved items against the training documents."""
        from tokenmill.eval.semantic_contamination import semantic_back_check
        from tokenmill.eval.tasks import load_task

        cfg = self.run.config.eval
        items = {t.name: [it.solved() for it in load_task(t)[: t.limit]] for t in cfg.tasks}
        return semantic_back_check(self.run, self.store, items, cfg.semantic_contamination)

    def score(self, model: torch.nn.Module, device: torch.device) -> dict[str, Any]:
        from tokenmill.eval.tasks import score_task

        if self.tok is None:
            return {}
        cfg, rc = self.run.config.eval, self.run.config
        mcfg = cast("ModelConfig", model.config)  # a tokenmill model's config; nn.Module's __getattr__ reads Tensor | Module
        max_len = min(rc.train.seq_len, mcfg.max_seq_len)
        tasks = [
            score_task(model, self.tok, t, device, cfg.batch_size, max_len, self.store.eos_id, self.store.pad_id, cfg.sandbox)
            for t in cfg.tasks
        ]
        return {"tasks": tasks, "contamination": self.contamination()}


def in_training_evaluator(run: RunDir, say: Callable[[str], None] | None = None) -> Callable[[int, torch.nn.Module], None]:
    """The callback the trainer calls every `train.eval_every` steps (and after the last): held-out
    buckets, probes, tasks (eval.tasks_in_training) and generation samples, on the loss timeline.
    With `eval.tiers` set: the cheap tier only (buckets, and probes/samples as it says). `say`
    gets one line per bucket (bits-per-byte, and its ratio to the unigram baseline)."""
    store = TokenStore(run.sub("tokens"))
    cfg = run.config.eval
    ev = Evaluator(store, run.config.train.seq_len, run.config.train.eval_docs, cfg.batch_size)
    cheap = cfg.tiers.cheap if cfg.tiers is not None else None  # tiers set: tasks and audits go to the watcher
    probes = _probe_sets(run, store) if cheap is None or cheap.probes else []
    tasks = TaskScorer(run, store) if cfg.tasks and cfg.tasks_in_training and cheap is None else None
    # Samples need text: a token store written without a tokenizer (synthetic ids) has none to decode.
    samples = cfg.num_samples > 0 and run.sub("tokenizer", "tokenizer.json").exists() and (cheap is None or cheap.samples)

    def on_eval(step: int, model: torch.nn.Module) -> None:
        device = next(model.parameters()).device
        extra: dict[str, Any] = {}
        if probes:
            extra["probes"] = score_probes(model, probes, device, cfg.batch_size, store.pad_id, run.config.train.dtype)
        if tasks is not None:
            extra.update(tasks.score(model, device))
        if samples:
            extra["samples"] = sample_texts(run, model, store, device)
        buckets = ev.score(model, device, run.config.train.dtype)
        write_eval(run, step, buckets, docs_per_bucket=run.config.train.eval_docs, **extra)
        for line in bucket_lines(step, buckets):
            if say is not None:
                say(line)

    return on_eval


class CheckpointScorer:
    """The full evaluation of checkpoints on one device: held-out buckets (eval.max_docs), samples
    and the audits. The windows, baseline and task contamination are built once and reused, so a
    watcher scoring many checkpoints pays for them once; `tokenmill eval` and the watcher share it,
    which is what makes their numbers equal."""

    def __init__(self, run: RunDir, device: torch.device):
        self.run, self.device = run, device
        self.store = TokenStore(run.sub("tokens"))
        self.ev = Evaluator(self.store, run.config.train.seq_len, run.config.eval.max_docs, run.config.eval.batch_size)
        self.tasks = TaskScorer(run, self.store) if run.config.eval.tasks else None

    def score(self, ckpt: Path) -> dict[str, Any]:
        """The record `write_eval` stores for the checkpoint: {"step", "buckets", "samples", "checkpoint", ...audits}."""
        from tokenmill.train.restore import load_model

        run = self.run
        model, step = load_model(Path(ckpt), self.device)
        buckets = self.ev.score(model, self.device, run.config.train.dtype)
        # a token store written without a tokenizer (synthetic ids) has no text to sample
        samples = sample_texts(run, model, self.store, self.device) if run.sub("tokenizer", "tokenizer.json").exists() else []
        extra = audits(run, model, self.store, self.device, self.tasks)
        return {
            "step": step,
            "buckets": buckets,
            "samples": samples,
            "checkpoint": str(ckpt),
            "docs_per_bucket": run.config.eval.max_docs,
            **extra,
        }


def run_eval(run: RunDir, checkpoint: Path | None = None) -> dict[str, Any]:
    """Evaluate a checkpoint (default: the latest valid one) on the held-out documents."""
    from tokenmill.train.checkpoint import latest_checkpoint

    ckpt = checkpoint or latest_checkpoint(run.sub("checkpoints"))
    if ckpt is None:
        raise FileNotFoundError(f"{run.sub('checkpoints')}: no checkpoint to evaluate (run `tokenmill train CONFIG`)")
    with torch_threads(run.config.train.threads):
        record = CheckpointScorer(run, resolve_device(run.config.train.device)).score(Path(ckpt))
    step, buckets = record.pop("step"), record.pop("buckets")
    write_eval(run, step, buckets, **record)
    extra = record
    summary = {
        "step": step,
        "bpb": {b: round(m["bpb"], 4) for b, m in buckets.items()},
        "unigram_bpb": {b: round(m["unigram_bpb"], 4) for b, m in buckets.items()},
    }
    if extra.get("tasks"):
        summary["tasks"] = {t["name"]: round(t["acc"], 4) for t in extra["tasks"]}
    if extra.get("long_context"):
        lc = extra["long_context"]
        summary["bpb_by_position"] = {f"{b['from']}-{b['to']}": round(b["bpb"], 4) for b in lc["positions"]["buckets"]}
        if "passkey" in lc:
            summary["passkey"] = round(lc["passkey"]["accuracy"], 4)
    if extra.get("contamination"):
        summary["flagged"] = [k for k, v in extra["contamination"].items() if v["flagged"]]
    return summary


def audits(
    run: RunDir, model: torch.nn.Module, store: TokenStore, device: torch.device, tasks: TaskScorer | None = None
) -> dict[str, Any]:
    """Probes, tasks (with each set's contamination next to its score), memorization and canary
    exposure (when curation inserted canaries), as configured. `tasks`: a scorer reused across
    checkpoints (its contamination is computed once)."""
    from tokenmill.eval.memorization import memorization

    cfg, out = run.config.eval, {}
    probes = _probe_sets(run, store)
    if probes:
        out["probes"] = score_probes(model, probes, device, cfg.batch_size, store.pad_id, run.config.train.dtype)
    if cfg.tasks:
        out.update((tasks or TaskScorer(run, store)).score(model, device))
    if cfg.memorization_docs > 0:
        mem = memorization(
            model,
            store,
            device,
            cfg.memorization_docs,
            cfg.memorization_prefix,
            cfg.memorization_suffix,
            max_context=run.config.train.seq_len,
            batch_size=cfg.batch_size,
            dtype=run.config.train.dtype,
        )
        out["memorization"] = {
            scope: _mem_rates(v) for scope, v in [("overall", mem["overall"]), *sorted(mem["buckets"].items())]
        }
        out["memorization"]["settings"] = {"prefix": mem["prefix"], "suffix": mem["suffix"]}
        if mem["hits"]:
            out["memorization"]["hits"] = mem["hits"]
    if cfg.long_context.enabled:  # after a context extension: is the longer context used?
        from tokenmill.eval.long_context import evaluate_long_context

        tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
        out["long_context"] = evaluate_long_context(
            model,
            store,
            tok,
            cfg.long_context,
            run.config.train.seq_len,
            cfg.batch_size,
            device,
            run.config.train.dtype,
            run.config.seed,
        )
    canaries = load_canaries(run.sub("curated"))
    if canaries and canaries["canaries"]:  # curate.canaries was on: their exposure (eval.canaries)
        tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
        out["canaries"] = canary_exposure(
            model,
            tok,
            canaries,
            device,
            cfg.batch_size,
            seed=run.config.seed,
            eos_id=store.eos_id,
            pad_id=store.pad_id,
            dtype=run.config.train.dtype,
        )
    if out.get("memorization", {}).get("hits") or out.get("canaries"):
        from tokenmill.eval.trace import attach_traces

        planted = canaries["canaries"] if canaries is not None and out.get("canaries") else []
        attach_traces(run, out, [c.text for c in planted])
    return out


def _mem_rates(v: dict[str, Any]) -> dict[str, Any]:
    """{"train"|"heldout": {"n", "exact", "token_match"}, "gap"} from memorization()'s layout."""

    def side(d: dict[str, Any]) -> dict[str, Any]:
        return {"n": d.get("docs"), "exact": d.get("exact_match"), "token_match": d.get("token_match")}

    return {"train": side(v["train"]), "heldout": side(v["heldout"]), "gap": v.get("gap")}
