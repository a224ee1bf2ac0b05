"""The ablation's evaluation set: the same bytes for every arm, picked before any filter ran.

The base config's sources go through extract + normalize only (the least curation any arm can
have); of those documents, the ones whose hash score (xxh64 of the id, salted with `eval.seed`)
falls below `eval.fraction` are candidates, and each bucket keeps its `max_docs` lowest scores:
a slice. Every arm then runs its decontamination against the whole set, so no arm trains on an
evaluation document or on a near-copy of one (more than `max_overlap` of its 13-grams), whatever
its own filters kept. Picking keeps a heap of `max_docs` entries per bucket: memory is bounded
by the set, not by the corpus.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from pathlib import Path
from typing import Any, Iterable

from tokenmill import json_limits
from tokenmill.data.curated import curated_buckets, iter_documents
from tokenmill.data.steps.decontaminate import read_items
from tokenmill.data.heldout_split import split_score
from tokenmill.decisions.ablate_config import AblateError, AblateEvalConfig
from tokenmill.runs import atomic_write_text

SET_FILE = "eval_set.jsonl"
MANIFEST = "manifest.json"


def pick_slice(docs: Iterable[tuple[str, str]], fraction: float, max_docs: int, seed: int) -> list[tuple[float, str, str]]:
    """(score, id, text) of the `max_docs` documents with the lowest scores under `fraction`,
    in (score, id) order; `nsmallest` holds `max_docs` entries, never the corpus."""
    scored = ((split_score(i, seed), i, t) for i, t in docs)
    return heapq.nsmallest(max_docs, (e for e in scored if e[0] < fraction), key=lambda e: (e[0], e[1]))


def build_eval_set(curated: Path, cfg: AblateEvalConfig, out: Path) -> dict[str, Any]:
    """Write out/<slice>.jsonl per slice, out/eval_set.jsonl (every item, for decontamination)
    and out/manifest.json (counts, bytes and the set's sha256). A finished set is reused."""
    manifest_path = out / MANIFEST
    if manifest_path.is_file():
        return json_limits.load_file(manifest_path)
    out.mkdir(parents=True, exist_ok=True)
    slices: dict[str, list[dict[str, str]]] = {}
    for bucket in curated_buckets(curated):
        picked = pick_slice(iter_documents(curated, bucket), cfg.fraction, cfg.max_docs, cfg.seed)
        if picked:
            slices[bucket] = [{"id": i, "text": t} for _, i, t in picked]
    for name, path in cfg.files.items():
        if name in slices:
            raise AblateError(f"eval.files {name!r}: a bucket of the sources has that name; name the slice otherwise")
        items = [{"id": f"{name}:{i}", "text": t} for i, t in read_items(Path(path), ["text"]) if t.strip()]
        if not items:
            raise AblateError(f"eval.files {name!r}: {path} holds no text")
        slices[name] = items
    if not slices:
        raise AblateError(f"{curated}: no document falls in the evaluation set (eval.fraction {cfg.fraction}); raise it")
    lines = []
    record: dict[str, Any] = {"slices": {}, "fraction": cfg.fraction, "seed": cfg.seed}
    for name, items in slices.items():
        text = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items)
        atomic_write_text(out / f"{name}.jsonl", text)
        lines.append("".join(json.dumps({**it, "slice": name}, ensure_ascii=False) + "\n" for it in items))
        record["slices"][name] = {
            "docs": len(items),
            "bytes": sum(len(it["text"].encode()) for it in items),
            "file": str(out / f"{name}.jsonl"),
            "from": "file " + cfg.files[name] if name in cfg.files else "bucket " + name,
        }
    whole = "".join(lines)
    atomic_write_text(out / SET_FILE, whole)
    record["sha256"] = hashlib.sha256(whole.encode()).hexdigest()
    atomic_write_text(manifest_path, json.dumps(record, indent=1))  # last: its presence means done
    return record
