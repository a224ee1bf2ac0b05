"""`tokenmill synth CONFIG`: sample documents from a run's checkpoint, write them with their
lineage, and measure them against the real corpus.

Output, under `out` (default <run>/synthetic/<name>/):
  samples.jsonl   one record per document: {"id", "text", "source": "synthetic",
                  "metadata": {"synthetic": lineage}} (lineage.py); curate it with a source
                  {kind: files, path: .../samples.jsonl, bucket: NAME, synthetic: true}
  manifest.json   the config, the model's lineage, counts, and the collapse figures: the
                  samples' and same-length windows of real training text (collapse.py), and the
                  model's held-out bits-per-byte on each real bucket
and `synth_start` / `synth_done` events in the run's events.jsonl. Running it again with the same
config writes the same documents.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import torch
import yaml
from pydantic import Field, ValidationError

from tokenmill.config import apply_overrides, load_config
from tokenmill.config_base import ConfigError, Strict, config_problem
from tokenmill.errors import UserError
from tokenmill.runs import RunDir, atomic_write_text
from tokenmill.synth import collapse
from tokenmill.mixture.collapse_guard import run_generation, synthetic_generations, used_buckets
from tokenmill.data.synthetic_lineage import LINEAGE_VERSION
from tokenmill.synth.sample import Sampled, document_record, pick_prompts, sample_documents
from tokenmill.tokens.store import TokenStore


class SynthError(UserError, ValueError):
    """A synthesis config or source run that cannot be used; the message says which and why."""


class PromptConfig(Strict):
    """What each synthetic document starts from."""

    tokens: int = Field(
        0,
        ge=0,
        description="Prompt length: the first this-many tokens of a document (0: unconditional, from the document separator).",
    )
    buckets: list[str] | None = Field(
        None, description="Buckets the prompt documents come from (None: every bucket the run trained on)."
    )
    split: Literal["train", "val"] = Field("train", description="Split the prompt documents come from.")
    keep: bool = Field(True, description="Start each document's text with its prompt (False: the continuation alone).")


class CollapseConfig(Strict):
    """How the samples are measured against the real corpus."""

    max_tokens: int = Field(
        50_000, gt=0, description="Tokens of samples (and of same-length real windows) the diversity figures are counted on."
    )
    tail: float = Field(
        0.1,
        gt=0.0,
        lt=1.0,
        description="The real corpus's tail: its rarest token ids that together make up this share of its tokens.",
    )
    real_docs: int = Field(
        100, ge=0, description="Held-out documents per real bucket the model's bits-per-byte is measured on (0: skip)."
    )


class SynthConfig(Strict):
    """Which model to sample, how, how much, and where the documents go."""

    run: str = Field(..., description="Run directory of the model to sample (relative to the working directory).")
    step: int | None = Field(None, description="Checkpoint step (None: the newest checkpoint that verifies).")
    name: str = Field("synth", min_length=1, description="Name of this sample set; the default output is <run>/synthetic/<name>.")
    out: str | None = Field(None, description="Output directory (None: <run>/synthetic/<name>).")
    docs: int = Field(300, gt=0, description="Documents to sample.")
    seed: int = Field(0, description="Seed; document i draws only from (seed, i).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (1: the model's own distribution; 0: greedy).")
    top_p: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="Nucleus: sample from the most likely tokens holding this much mass (1: all; truncation cuts the tails first).",
    )
    top_k: int | None = Field(None, ge=1, description="Sample from the k most likely tokens only (None: no limit).")
    max_new_tokens: int = Field(256, gt=0, description="Longest continuation, in tokens.")
    min_new_tokens: int = Field(0, ge=0, description="The document separator is not sampled before this many new tokens.")
    batch_size: int = Field(32, gt=0, description="Documents sampled together (speed only: a document does not depend on it).")
    device: str | None = Field(None, description="Device to sample on (None: the run's train.device).")
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    metrics: CollapseConfig = Field(default_factory=CollapseConfig)


def load_synth_config(path: Path, overrides: list[str] | None = None) -> SynthConfig:
    """Read the YAML, apply `key=value` overrides, validate (unknown keys are errors)."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SynthError(f"{path}: cannot read the synthesis config: {exc}") from exc
    if not isinstance(data, dict):
        raise SynthError(f"{path}: top level must be a mapping")
    try:
        return SynthConfig.model_validate(apply_overrides(data, overrides or []))
    except ValidationError as exc:
        raise SynthError(config_problem(exc, f"{path}: invalid synthesis config")) from exc


# --------------------------------------------------------------------------- the source model
def open_run(path: Path) -> RunDir:
    if not (path / "config.yaml").is_file():
        raise SynthError(f"{path}: not a run directory (no config.yaml)")
    try:
        return RunDir(load_config(path / "config.yaml"), path)
    except ConfigError as exc:
        raise SynthError(str(exc)) from exc


def pick_checkpoint(run: RunDir, step: int | None) -> Path:
    from tokenmill.train.checkpoint import latest_checkpoint, verify_checkpoint

    root = run.sub("checkpoints")
    if step is None:
        ckpt = latest_checkpoint(root)
        if ckpt is None:
            raise SynthError(f"{root}: no checkpoint verifies (train the run first)")
        return ckpt
    ckpt = root / f"step_{step}"
    if not ckpt.is_dir():
        raise SynthError(f"{ckpt}: no such checkpoint")
    verify_checkpoint(ckpt)
    return ckpt


def model_digest(ckpt: Path) -> str | None:
    """SHA-256 of model.safetensors as its verified SHA256SUMS lists it (None: a sharded checkpoint)."""
    for line in (ckpt / "SHA256SUMS").read_text().splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[1].lstrip("*").strip() == "model.safetensors":
            return parts[0]
    return None


def base_lineage(cfg: SynthConfig, run: RunDir, ckpt: Path, step: int, store: TokenStore) -> dict[str, Any]:
    """What every document of this call shares: version, generation, model, tokenizer, sampling."""
    tokenizer = run.sub("tokenizer", "tokenizer.json")
    return {
        "version": LINEAGE_VERSION,
        "generation": run_generation(run.path, store, run.config.mixture) + 1,
        "run": str(run.path.resolve()),
        "checkpoint": str(ckpt.resolve()),
        "step": step,
        "model_sha256": model_digest(ckpt),
        "tokenizer_sha256": hashlib.sha256(tokenizer.read_bytes()).hexdigest(),
        "sampling": cfg.model_dump(include={"temperature", "top_p", "top_k", "max_new_tokens", "min_new_tokens"}),
        "seed": cfg.seed,
    }


def prompt_buckets(cfg: SynthConfig, run: RunDir, store: TokenStore) -> list[str]:
    """prompt.buckets, checked against the store, or the buckets the run trained on."""
    buckets = cfg.prompt.buckets or used_buckets(store, run.config.mixture)
    unknown = sorted(set(buckets) - set(store.buckets))
    if unknown:
        raise SynthError(f"prompt.buckets {unknown} are not buckets of {store.root} (buckets: {store.buckets})")
    return buckets


# --------------------------------------------------------------------------- measuring
def real_buckets(run: RunDir, store: TokenStore) -> list[str]:
    """Buckets of the store that hold no synthetic document: the real corpus."""
    return [b for b in store.buckets if not synthetic_generations(run.sub("curated"), b)]


def measure(
    cfg: SynthConfig, run: RunDir, store: TokenStore, samples: list[list[int]], model: torch.nn.Module, device: torch.device
) -> dict[str, Any]:
    """Collapse figures of the samples and of same-length real windows, and the real bpb."""
    import numpy as np

    real = real_buckets(run, store)
    m = cfg.metrics
    docs = collapse.cap_tokens([np.asarray(s, dtype=np.int64) for s in samples if s], m.max_tokens)
    windows = collapse.real_windows(store, real, [len(d) for d in docs], cfg.seed)
    tail = collapse.tail_ids(collapse.real_counts(store, real, skip=[store.eos_id]), m.tail)
    ours = collapse.collapse_metrics(docs, store.vocab_size, tail)
    result: dict[str, Any] = {"real_buckets": real, "tail": m.tail, "tail_ids": int(tail.sum()), "samples": ours}
    if windows:
        ref = collapse.collapse_metrics(windows, store.vocab_size, tail)
        result.update(real=ref, ratio=collapse.ratios(ours, ref))
    if m.real_docs and real:
        result["real_bpb"] = real_bpb(run, store, model, device, real, m.real_docs)
    return result


def real_bpb(
    run: RunDir, store: TokenStore, model: torch.nn.Module, device: torch.device, buckets: list[str], max_docs: int
) -> dict[str, float]:
    """The model's held-out bits-per-byte on each real bucket (the eval stage's scoring)."""
    from tokenmill.eval.evaluate import Evaluator

    ev = Evaluator(store, run.config.train.seq_len, max_docs, run.config.eval.batch_size)
    scores = ev.score(model, device, run.config.train.dtype)
    return {b: scores[b]["bpb"] for b in buckets if b in scores}


# --------------------------------------------------------------------------- entry point
@contextlib.contextmanager
def _bar(total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar over the documents on a terminal; nothing elsewhere."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True, soft_wrap=True)  # lines are never cut at 80 columns (paths, sentences)
    with Progress(
        TextColumn("[bold]synth[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("documents", total=total)
        yield lambda n: bar.advance(task, n)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """torch's CPU threads set to the run's train.threads (process-wide: put back afterwards)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def synthesize(cfg: SynthConfig) -> dict[str, Any]:
    """Sample, write samples.jsonl and manifest.json, measure; returns the manifest."""
    run = open_run(Path(cfg.run))
    with _threads(run.config.train.threads):
        return _synthesize(cfg, run)


def _synthesize(cfg: SynthConfig, run: RunDir) -> dict[str, Any]:
    from tokenmill.tokenizer.bpe import load_tokenizer
    from tokenmill.train.restore import load_model
    from tokenmill.train.device import autocast, resolve_device

    ckpt = pick_checkpoint(run, cfg.step)
    device = resolve_device(cfg.device or run.config.train.device)
    model, step = load_model(ckpt, device)
    store = TokenStore(run.sub("tokens"))
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    out = Path(cfg.out) if cfg.out else run.sub("synthetic", cfg.name)
    lineage = base_lineage(cfg, run, ckpt, step, store)
    prompts = pick_prompts(store, cfg.docs, cfg.prompt.tokens, prompt_buckets(cfg, run, store), cfg.prompt.split, cfg.seed)
    run.events.write("synth", "synth_start", out=str(out), docs=cfg.docs, checkpoint=str(ckpt), generation=lineage["generation"])
    t0 = time.time()
    options = cfg.model_dump(include={"temperature", "top_k", "top_p", "max_new_tokens", "min_new_tokens"})
    # float32, not the run's autocast: bf16 logits fail the KV cache's check against the full
    # forward (generate_batch would then recompute every window, ~10x slower on CPU)
    with _bar(cfg.docs) as advance:
        sampled = list(
            sample_documents(
                model,
                prompts,
                seed=cfg.seed,
                batch_size=cfg.batch_size,
                stop_id=store.eos_id,
                max_context=run.config.train.seq_len,
                device=device,
                options=options,
                on_batch=advance,
            )
        )
    seconds = time.time() - t0
    records, empty = write_samples(out / "samples.jsonl", sampled, tok, lineage, cfg, run.path.name)
    with autocast(device, run.config.train.dtype):
        figures = measure(cfg, run, store, [s.tokens for s in sampled], model, device)
    manifest = {
        "config": cfg.model_dump(mode="json"),
        "lineage": lineage,
        "out": str(out),
        "samples": str(out / "samples.jsonl"),
        "docs": records,
        "empty": empty,
        "new_tokens": sum(len(s.tokens) for s in sampled),
        "seconds": round(seconds, 2),
        "stopped_at_eos": sum(s.stop == "eos" for s in sampled),
        "metrics": figures,
    }
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1))
    run.events.write("synth", "synth_done", **{k: v for k, v in manifest.items() if k != "config"})
    return manifest


def write_samples(
    path: Path, sampled: list[Sampled], tok: Any, lineage: dict[str, Any], cfg: SynthConfig, prefix: str
) -> tuple[int, int]:
    """samples.jsonl, atomically; (documents written, empty ones left out: nothing to curate)."""
    lines, empty = [], 0
    for s in sampled:
        keep = cfg.prompt.keep and s.prompt.doc is not None
        text = tok.decode((s.prompt.tokens if keep else []) + s.tokens)
        if not text.strip():
            empty += 1
            continue
        lines.append(json.dumps(document_record(s, text, lineage, f"{prefix}-s{cfg.seed}"), ensure_ascii=False))
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines), empty


def run_synth(path: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    return synthesize(load_synth_config(path, overrides))
