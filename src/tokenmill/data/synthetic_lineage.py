"""The lineage of a synthetic document, carried by the document itself.

`tokenmill synth` writes every sampled document as one JSONL record

    {"id": ..., "text": ..., "source": "synthetic", "metadata": {"synthetic": LINEAGE}}

and the curate stage keeps a JSONL record's id, source and metadata on its row (the `metadata`
column, JSON), so LINEAGE reaches every curated row and, through the token store's document ids,
every training token. LINEAGE holds the version of this layout, the generation, the source run,
the checkpoint (path, step, SHA-256 of model.safetensors), the tokenizer's SHA-256, the sampling
parameters, the seed, the document's index and its prompt.

Generations: a model trained on real data only is generation 0; a document sampled from a model
of generation g is of generation g + 1; a model's generation is the newest generation among the
synthetic documents of the buckets its mixture draws from (guard.py). A source marked
`synthetic: true` whose records carry no lineage (an outside teacher's output) counts as
generation 1: a model trained on people's text wrote it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Iterator

from tokenmill import json_limits
from tokenmill.data.document import RawRecord, Rejection, format_value

LINEAGE_VERSION = 1
KEY = "synthetic"  # the lineage's key inside a record's `metadata`
EXTERNAL = {"version": LINEAGE_VERSION, "generation": 1, "teacher": "external"}


def lineage_problem(lineage: Any) -> str | None:
    """Why a lineage record cannot be used, or None: it needs an integer generation >= 1."""
    if not isinstance(lineage, dict):
        return f"the {KEY!r} lineage is a JSON {type(lineage).__name__}, not an object"
    gen = lineage.get("generation")
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 1:
        return f"the {KEY!r} lineage needs an integer generation >= 1, got {gen!r}"
    return None


def lineage_of(metadata: str | None) -> dict[str, Any] | None:
    """The usable lineage inside a curated row's metadata JSON, or None (text people wrote)."""
    if not metadata or f'"{KEY}"' not in metadata:
        return None
    try:
        meta = json_limits.loads(metadata)
    except ValueError:  # not JSON, or too deep: no usable lineage
        return None
    inner = meta.get("metadata") if isinstance(meta, dict) else None
    lineage = inner.get(KEY) if isinstance(inner, dict) else None
    return lineage if lineage is not None and lineage_problem(lineage) is None else None


def _with_lineage(record: RawRecord) -> RawRecord:
    """The record with its lineage checked, or an outside teacher's lineage added."""
    meta = json_limits.loads(record.metadata) if record.metadata else {}
    inner = meta.get("metadata")
    if isinstance(inner, dict) and KEY in inner:
        problem = lineage_problem(inner[KEY])
        if problem is None:
            return record
        rejection = Rejection("read", "bad_lineage", format_value(json.dumps(inner[KEY])[:200]), f"{record.url}: {problem}")
        return dataclasses.replace(record, text=None, problem=rejection)
    # an outside teacher's record: its own metadata stays, beside the lineage it lacks
    if inner is None:
        inner = {}
    elif not isinstance(inner, dict):
        inner = {"value": inner}
    meta["metadata"] = {**inner, KEY: EXTERNAL}
    return dataclasses.replace(record, metadata=json.dumps(meta, ensure_ascii=False))


def synthetic_records(records: Iterable[RawRecord]) -> Iterator[RawRecord]:
    """The records of a `synthetic: true` source: each readable one leaves with a lineage (its own,
    checked: a malformed one quarantines the record at step "read", rule bad_lineage)."""
    for record in records:
        yield record if record.problem is not None else _with_lineage(record)
