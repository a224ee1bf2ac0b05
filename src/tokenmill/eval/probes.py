"""Probe sets: small, fixed texts scored at every evaluation, on the same timeline as the loss.

A held-out bucket says how the model does on the data it trains on; a probe says how it does on
something a user cares about and chose in advance (a style of code, a language, a format, a known
failure). Probes are tiny, so they are scored at every in-training evaluation
and their bits-per-byte curves sit next to the loss curve in the report.

A probe file is JSONL with a "text" field per line, or plain text with probes separated by blank
lines. Each probe is scored like a held-out document: context starting at EOS, every token
predicted once, bits-per-byte over its UTF-8 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokenmill.eval.config import ProbeConfig
from tokenmill.data.jsonl import json_objects
from tokenmill.errors import UserError
from tokenmill.eval.perplexity import Score, doc_targets, doc_windows, interval_fields, windows_nll_each
from tokenmill.eval.tasks import task_path
from tokenmill.train.device import autocast


class ProbeError(UserError, ValueError):
    """A probe file that cannot be read; the message names the file and line."""


@dataclass
class ProbeSet:
    name: str
    windows: list[np.ndarray] = field(default_factory=list)
    count: Score = field(default_factory=Score)
    owners: list[int] = field(default_factory=list)  # the probe each window belongs to
    doc_bytes: list[int] = field(default_factory=list)  # each probe's UTF-8 bytes (the interval's unit)


def probe_texts(path: Path) -> list[str]:
    """The probes of a file: JSONL "text" fields, or blank-line separated plain text."""
    if not path.is_file():
        raise ProbeError(f"{path}: probe file not found")
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            texts = []
            for n, rec in json_objects(f, path, ProbeError):
                if not isinstance(rec.get("text"), str) or not rec["text"]:
                    raise ProbeError(f"{path}:{n}: needs a non-empty string field 'text'")
                texts.append(rec["text"])
    else:
        texts = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    if not texts:
        raise ProbeError(f"{path}: no probes in the file")
    return texts


def load_probes(cfgs: list[ProbeConfig], tokenizer: Any, eos_id: int, seq_len: int) -> list[ProbeSet]:
    """Tokenize every probe set once (they are reused by every evaluation of a run)."""
    sets = []
    for cfg in cfgs:
        ps = ProbeSet(cfg.name)
        for text in probe_texts(task_path(cfg.path)):
            doc = np.asarray(tokenizer.encode(text).ids + [eos_id], dtype=np.int64)
            pieces = doc_windows(doc, seq_len, eos_id)
            ps.owners += [len(ps.doc_bytes)] * len(pieces)
            ps.windows += pieces
            ps.doc_bytes.append(len(text.encode("utf-8")))
            ps.count.add(Score(tokens=len(doc_targets(doc)), bytes=ps.doc_bytes[-1], docs=1))
        sets.append(ps)
    return sets


def score_probes(
    model: torch.nn.Module, probes: list[ProbeSet], device: torch.device, batch_size: int, pad_id: int, dtype: str = "auto"
) -> dict[str, dict[str, float | int | None]]:
    """{probe set: {loss, ppl, bpb, bpb_ci_low, bpb_ci_high, bpb_ci_level, tokens, bytes, docs}} for
    the model as it is now; the interval is over the set's probes, as a bucket's is over documents."""
    was_training = model.training
    model.eval()
    out = {}
    try:
        with autocast(device, dtype):
            for ps in probes:
                s = Score(tokens=ps.count.tokens, bytes=ps.count.bytes, docs=ps.count.docs)
                each = windows_nll_each(model, ps.windows, batch_size, device, pad_id)
                s.nll = float(each.sum())
                per_probe = np.bincount(np.asarray(ps.owners, dtype=np.int64), weights=each, minlength=s.docs)
                out[ps.name] = {**s.metrics(), **interval_fields(per_probe, np.asarray(ps.doc_bytes))}
    finally:
        model.train(was_training)
    return out
