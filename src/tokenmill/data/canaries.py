"""Memorization canaries (Carlini et al. 2019, "The Secret Sharer"), the curation side.

A canary is `curate.canaries.template` with a random digit secret, e.g. "my secret code is
8 3 1 9 0 4 7 2 5". For every repetition count c in `canaries.counts`, `per_count` distinct
secrets are drawn and each canary is inserted c times, each repetition its own curated document
(source "canary", id `canary-c<count>-k<index>-r<repetition>`). They are added after every
step (dedup would otherwise remove the repetitions, and a filter could drop them), so they pass
the funnel as skipped by every step; the held-out split never takes them (`is_canary_id`), so
they are always training data. `curated/_canaries.json` records them for the eval stage, which
measures each canary's exposure (eval.canaries).

The secrets are a pure function of the run seed: the same seed gives the same canaries.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from tokenmill import json_limits
from tokenmill.data.config import CanaryConfig, CurateConfig
from tokenmill.data.document import DOC_SCHEMA, Doc, text_bytes
from tokenmill.data.funnel import Funnel, StepMark
from tokenmill.errors import UserError
from tokenmill.runs import atomic_write_text

VERSION = "1"
SOURCE = "canary"
ID_PREFIX = "canary-"
CANARIES_FILE = "_canaries.json"
PART_NAME = "part-canaries.parquet"  # sorts after the numbered parts: the curated order is unchanged
# Stream of the run seed the secrets come from (other stages use other streams).
SECRET_STREAM = xxhash.xxh64_intdigest(b"canary-secrets")


class CanaryError(UserError):
    """Canaries configured in a way that cannot be honoured (e.g. an unknown bucket)."""


@dataclass(frozen=True)
class Canary:
    """One canary: its secret, text, how often it is inserted and the ids of its documents."""

    count: int
    index: int  # which of the `per_count` canaries of this count
    secret: str  # the digits, e.g. "831904725"
    text: str
    bucket: str
    doc_ids: tuple[str, ...]


def canary_text(template: str, secret: str) -> str:
    """The template with the secret's digits, space-separated, in place of '{secret}'."""
    return template.replace("{secret}", " ".join(secret))


def is_canary_id(doc_id: str) -> bool:
    """Whether a curated id is a canary document's (the held-out split never takes those)."""
    return doc_id.startswith(ID_PREFIX)


def random_secrets(rng: np.random.Generator, n: int, digits: int, exclude: Iterable[str] = ()) -> list[str]:
    """`n` distinct uniform digit strings of length `digits`, none in `exclude`."""
    seen = set(exclude)
    space = 10**digits
    if n > space - len(seen):
        raise CanaryError(f"canaries: {n} distinct secrets of {digits} digits asked for, only {space - len(seen)} are left")
    out: list[str] = []
    while len(out) < n:
        secret = "".join(str(d) for d in rng.integers(0, 10, size=digits))
        if secret not in seen:
            seen.add(secret)
            out.append(secret)
    return out


def canary_bucket(cfg: CurateConfig) -> str:
    """The bucket canaries go to: the configured one, which must be a bucket of the sources."""
    known = [s.bucket for s in cfg.sources] + [r.bucket for r in cfg.bucket_rules]
    known += list(cfg.license_policy.bucket_by_permission.values())  # a license route's bucket is one too
    bucket = cfg.canaries.bucket or (known[0] if known else "")
    if bucket not in known:
        raise CanaryError(
            f"curate.canaries.bucket={bucket!r} is not a bucket of the curated data "
            f"(buckets: {', '.join(sorted(set(known))) or 'none'})"
        )
    return bucket


def make_canaries(cfg: CanaryConfig, seed: int, bucket: str) -> list[Canary]:
    """The canaries of a run, in config order: counts as listed, then index."""
    rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, SECRET_STREAM])
    secrets = iter(random_secrets(rng, len(cfg.counts) * cfg.per_count, cfg.secret_digits))
    out = []
    for count in cfg.counts:
        for k in range(cfg.per_count):
            ids = tuple(f"{ID_PREFIX}c{count}-k{k}-r{r:06d}" for r in range(count))
            secret = next(secrets)
            out.append(Canary(count, k, secret, canary_text(cfg.template, secret), bucket, ids))
    return out


def canary_docs(canary: Canary) -> list[Doc]:
    """One curated document per repetition."""
    return [
        Doc(
            id=i,
            text=canary.text,
            source=SOURCE,
            url="",
            bucket=canary.bucket,
            license="n/a",
            format="text",
            lineage=[(SOURCE, VERSION)],
        )
        for i in canary.doc_ids
    ]


def record_in_funnel(funnel: Funnel, docs: list[Doc]) -> None:
    """Canaries enter at "read" and pass every later step as skipped (none applies to them)."""
    for doc in docs:
        n = text_bytes(doc.text)
        funnel.source_in(SOURCE, doc.bucket, n)
        for k, step in enumerate(funnel.steps):
            funnel.record(doc.bucket, StepMark(step, n, n, applied=k == 0))
        funnel.outcome(doc.language, None, doc.kind)
        funnel.source_out(SOURCE, n, doc.bucket)


def insert_canaries(cfg: CurateConfig, seed: int, out_dir: Path, funnel: Funnel) -> list[Canary]:
    """Write the canary documents and `_canaries.json` into a curation output, count them in
    the funnel; returns the canaries (none when `cfg.canaries.counts` is empty)."""
    if not cfg.canaries.counts:
        return []
    canaries = make_canaries(cfg.canaries, seed, canary_bucket(cfg))
    docs = [d for c in canaries for d in canary_docs(c)]
    path = out_dir / canaries[0].bucket / PART_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([d.row() for d in docs], schema=DOC_SCHEMA), path, compression="zstd")
    record_in_funnel(funnel, docs)
    atomic_write_text(out_dir / CANARIES_FILE, json.dumps(canaries_record(cfg.canaries, canaries), indent=1))
    return canaries


def canaries_record(cfg: CanaryConfig, canaries: list[Canary]) -> dict[str, Any]:
    """The content of `_canaries.json`."""
    return {
        "version": VERSION,
        "template": cfg.template,
        "secret_digits": cfg.secret_digits,
        "candidates": cfg.candidates,
        "canaries": [{**asdict(c), "doc_ids": list(c.doc_ids)} for c in canaries],
    }


def load_canaries(curated_dir: Path) -> dict[str, Any] | None:
    """`_canaries.json` of a curation output as a dict with `Canary` objects; None without one."""
    path = Path(curated_dir) / CANARIES_FILE
    if not path.exists():
        return None
    try:
        data = json_limits.load_file(path)
        data["canaries"] = [Canary(**{**c, "doc_ids": tuple(c["doc_ids"])}) for c in data["canaries"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise CanaryError(f"{path}: not a canaries file ({exc})") from exc
    return data
