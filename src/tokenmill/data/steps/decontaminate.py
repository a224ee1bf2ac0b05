"""Train–test decontamination: word n-gram overlap with the evaluation sets the user lists.

Train–test contamination removal protects the evaluation's credibility. The method is
GPT-3's (Brown et al. 2020, App. C) and lm-evaluation-harness's janitor: text is lowercased,
punctuation deleted and split on whitespace (`minhash.normalized_bytes`, the same words MinHash
shingles), and an evaluation item is present in a training document when they share word
n-grams, n = 13 by default.

prepare (driver, once per run): every item of every eval set (JSONL, optionally .gz; its text
  is the `text_fields` found in the record, joined) becomes the set of its hashed n-grams. The
  index is the sorted distinct n-gram hashes, the items owning each, and the number of
  distinct n-grams of every item, saved as .npy under work_dir/decontaminate/ with
  a fingerprint of the inputs, so a resumed run reuses it. Items with fewer than n words have
  no n-gram and are reported as too short to check (GPT-3 lowered n per benchmark instead).
setup (each worker): memory-maps the index (workers share its pages).
process (each document): with G(d) the document's distinct n-grams and G(e) an item's,
  overlap(d, e) = |G(d) ∩ G(e)| / |G(e)|, the share of the item found in the document
  (one binary search per n-gram in the sorted distinct n-grams, whose owners are stored
  CSR-style). The document records the largest
  overlap, its eval set and the shared n-gram count (ties: more shared n-grams, then the first
  item), and is removed (rule "eval_overlap") when that share is above `max_overlap`
  (0: any shared n-gram, GPT-3's rule).
report: the step keeps per-eval-set tallies that never influence a document (docs removed,
  docs with any overlap, items over the threshold); the executor collects `take_stats()` per
  shard or chunk and writes `overlap_report(...)` as OUT/_decontamination.json.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from tokenmill import json_limits
from tokenmill.data.config import CurateConfig
from tokenmill.data.document import Doc, Rejection, format_value
from tokenmill.data.jsonl import json_objects
from tokenmill.data.dedup.minhash import sorted_unique, word_ngram_stream
from tokenmill.data.step import DocStep
from tokenmill.errors import UserError

VERSION = "ngram-1"
RULE = "eval_overlap"
INDEX_DIR = "decontaminate"
_META = "meta.json"


class EvalSetError(UserError, ValueError):
    """An evaluation set that cannot be read; the message names the file and the line."""


def _open(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            yield from fh
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise EvalSetError(f"{path}: cannot read evaluation set: {exc}") from exc


def item_text(record: dict[str, Any], fields: Iterable[str]) -> str:
    """The text of an evaluation item: its configured fields (strings, numbers, lists of them)."""
    parts: list[str] = []
    for name in fields:
        value = record.get(name)
        values = value if isinstance(value, list) else [value]
        parts.extend(str(v) for v in values if isinstance(v, (str, int, float)) and not isinstance(v, bool))
    return "\n".join(parts)


def read_items(path: Path, fields: list[str]) -> Iterator[tuple[str, str]]:
    """(item id, item text) of every record; the id is the record's "id", else its line number."""
    for lineno, record in json_objects(_open(path), path, EvalSetError):
        yield str(record.get("id", f"line {lineno}")), item_text(record, fields)


def _fingerprint(paths: list[Path], names: list[str], fields: list[str], n: int) -> str:
    h = xxhash.xxh3_128()
    h.update(json.dumps([VERSION, n, fields, names]).encode())
    for path in paths:
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        except OSError as exc:
            raise EvalSetError(f"{path}: cannot read evaluation set: {exc}") from exc
    return h.hexdigest()


def build_index(paths: list[Path], names: list[str], fields: list[str], n: int, out: Path) -> dict[str, Any]:
    """Hash every item's n-grams and save the sorted index under `out`; returns its meta."""
    grams: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    totals: list[int] = []
    item_set: list[int] = []
    item_ids: list[str] = []
    sets = []
    for s, (path, name) in enumerate(zip(paths, names)):
        items = list(read_items(path, fields))
        g, offsets = word_ngram_stream([t for _, t in items], n, short=False)
        counts = np.diff(offsets)
        for i, (item_id, _) in enumerate(items):
            item = len(item_ids)
            item_ids.append(item_id)
            item_set.append(s)
            mine = sorted_unique(g[offsets[i] : offsets[i + 1]].copy())
            totals.append(len(mine))
            if len(mine):
                grams.append(mine)
                owners.append(np.full(len(mine), item, dtype=np.int32))
        sets.append({"name": name, "path": str(path), "items": len(items), "too_short": int(np.count_nonzero(counts == 0))})
    all_grams = np.concatenate(grams) if grams else np.empty(0, dtype=np.uint64)
    all_owners = np.concatenate(owners) if owners else np.empty(0, dtype=np.int32)
    order = np.lexsort((all_owners, all_grams))
    all_grams, all_owners = all_grams[order], all_owners[order]
    # CSR: distinct n-grams, and where each one's owners start in `owners`
    uniq, first = np.unique(all_grams, return_index=True)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "ngrams.npy", uniq)
    np.save(out / "starts.npy", np.append(first, len(all_grams)).astype(np.int64))
    np.save(out / "owners.npy", all_owners)
    np.save(out / "item_ngrams.npy", np.asarray(totals, dtype=np.int32))
    np.save(out / "item_set.npy", np.asarray(item_set, dtype=np.int32))
    return {"version": VERSION, "n": n, "sets": sets, "item_ids": item_ids}


def _load_shared(path: Path) -> np.ndarray:
    """Memory-mapped, so the workers of a machine share one copy (numpy cannot map 0 bytes)."""
    return np.load(path) if path.stat().st_size < (1 << 20) else np.load(path, mmap_mode="r")


class Decontaminate(DocStep):
    """Removes documents sharing more than `max_overlap` of some eval item's word n-grams."""

    name = "decontaminate"
    version = VERSION

    def __init__(self, cfg: CurateConfig, base_dir: Path | None = None):
        super().__init__(cfg, base_dir)
        self.dcfg = cfg.decontaminate
        self._stats: dict[int, dict[str, Any]] = {}

    def enabled(self) -> bool:
        return bool(self.dcfg.eval_sets)

    def _inputs(self) -> tuple[list[Path], list[str]]:
        return [self.resolve(p) for p in self.dcfg.eval_sets], list(self.dcfg.eval_sets)

    def prepare(self, work_dir: Path) -> None:
        paths, names = self._inputs()
        for p in paths:
            if not p.is_file():
                raise EvalSetError(f"{p}: evaluation set not found")
        out = work_dir / INDEX_DIR
        fp = _fingerprint(paths, names, self.dcfg.text_fields, self.dcfg.n)
        meta_path = out / _META
        if meta_path.is_file() and json_limits.load_file(meta_path).get("fingerprint") == fp:
            return  # a resumed run: same inputs, same index
        meta_path.unlink(missing_ok=True)  # no stale meta may vouch for half-rewritten arrays
        meta = build_index(paths, names, self.dcfg.text_fields, self.dcfg.n, out)
        meta["fingerprint"] = fp
        tmp = meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta))
        tmp.replace(meta_path)  # written last: its presence means the arrays are complete

    def setup(self, work_dir: Path) -> None:
        d = work_dir / INDEX_DIR
        self.meta = json_limits.load_file((d / _META))
        self.ngrams = _load_shared(d / "ngrams.npy")
        self.starts = _load_shared(d / "starts.npy")
        self.owners = _load_shared(d / "owners.npy")
        self.item_ngrams = np.load(d / "item_ngrams.npy")
        self.item_set = np.load(d / "item_set.npy")
        self.set_names = [s["name"] for s in self.meta["sets"]]
        limits = [self.dcfg.set_max_overlap.get(n, self.dcfg.max_overlap) for n in self.set_names]
        self.item_limit = np.asarray(limits, dtype=np.float64)[self.item_set] if len(self.item_set) else np.empty(0)

    def overlaps(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(items, shared n-gram counts) of every item sharing an n-gram with the text."""
        grams, _ = word_ngram_stream([text], self.dcfg.n, short=False)
        if len(grams) == 0 or len(self.ngrams) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        grams = sorted_unique(grams)
        pos = np.searchsorted(self.ngrams, grams)
        pos[pos == len(self.ngrams)] = 0
        pos = pos[self.ngrams[pos] == grams]  # the document's n-grams that are in the index
        lo, hi = self.starts[pos], self.starts[pos + 1]
        cnt = hi - lo
        total = int(cnt.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        # every index row in [lo, hi) of every n-gram, without a Python loop
        rows = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)
        items, shared = np.unique(np.asarray(self.owners)[rows], return_counts=True)
        return items.astype(np.int64), shared.astype(np.int64)

    def process(self, doc: Doc) -> Rejection | None:
        items, shared = self.overlaps(doc.text or "")
        if len(items) == 0:
            doc.contamination = {"max_overlap": 0.0, "eval_set": None, "shared_ngrams": 0}
            return None
        share = shared / self.item_ngrams[items]
        over = share > self.item_limit[items]  # each item against its own set's limit
        # the item reported: the largest share among those over their limit (else overall);
        # ties: more shared n-grams, then the first item
        best = int(np.lexsort((items, -shared, -share, ~over))[0])
        item, top = int(items[best]), float(share[best])
        eval_set = self.set_names[int(self.item_set[item])]
        doc.contamination = {"max_overlap": top, "eval_set": eval_set, "shared_ngrams": int(shared[best])}
        removed = bool(over[best])
        self._tally(items, share, int(self.item_set[item]), removed)
        if not removed:
            return None
        n = self.dcfg.n
        return Rejection(
            self.name,
            RULE,
            format_value(top),
            f"contains {shared[best]} of the {self.item_ngrams[item]} {n}-grams ({top:.1%}) of item "
            f"{self.meta['item_ids'][item]!r} of {eval_set}; the limit is {self.item_limit[item]:.1%}",
        )

    # ----------------------------------------------------------------- report tallies
    def _tally(self, items: np.ndarray, share: np.ndarray, best_set: int, removed: bool) -> None:
        over = items[share > self.item_limit[items]]
        for s in np.unique(self.item_set[items]):
            st = self._stats.setdefault(int(s), {"docs_removed": 0, "docs_with_overlap": 0, "items": set()})
            st["docs_with_overlap"] += 1
            st["items"].update(int(i) for i in over[self.item_set[over] == s])
        if removed:
            self._stats[best_set]["docs_removed"] += 1

    def take_stats(self) -> dict[str, Any]:
        """The tallies since the last call (then reset), picklable and mergeable."""
        stats = {
            self.set_names[s]: {
                "docs_removed": st["docs_removed"],
                "docs_with_overlap": st["docs_with_overlap"],
                "contaminated_items": sorted(st["items"]),
            }
            for s, st in sorted(self._stats.items())
        }
        self._stats = {}
        return stats


def merge_overlap_stats(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """`take_stats` results of several shards/chunks added up (order does not matter)."""
    merged: dict[str, dict[str, Any]] = {}
    for part in parts:
        for name, st in part.items():
            m = merged.setdefault(name, {"docs_removed": 0, "docs_with_overlap": 0, "contaminated_items": set()})
            m["docs_removed"] += st["docs_removed"]
            m["docs_with_overlap"] += st["docs_with_overlap"]
            m["contaminated_items"].update(st["contaminated_items"])
    return {name: {**m, "contaminated_items": sorted(m["contaminated_items"])} for name, m in sorted(merged.items())}


def overlap_report(
    parts: Iterable[dict[str, Any]],
    work_dir: Path,
    max_overlap: float,
    list_items: int = 100,
    set_max_overlap: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The per-eval-set report (OUT/_decontamination.json) from the stats of every shard."""
    meta = json_limits.load_file((work_dir / INDEX_DIR / _META))
    merged = merge_overlap_stats(parts)
    report: dict[str, Any] = {"n": meta["n"], "max_overlap": max_overlap, "eval_sets": {}}
    for s in meta["sets"]:
        st = merged.get(s["name"], {"docs_removed": 0, "docs_with_overlap": 0, "contaminated_items": []})
        checked = s["items"] - s["too_short"]
        hit = st["contaminated_items"]
        report["eval_sets"][s["name"]] = {
            "max_overlap": (set_max_overlap or {}).get(s["name"], max_overlap),
            "items": s["items"],
            "items_too_short": s["too_short"],
            "items_contaminated": len(hit),
            "contaminated_share": len(hit) / checked if checked else 0.0,
            "docs_removed": st["docs_removed"],
            "docs_with_overlap": st["docs_with_overlap"],
            "contaminated_item_ids": [meta["item_ids"][i] for i in hit[:list_items]],
        }
    return report
