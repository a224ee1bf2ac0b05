"""Build the labelled toxicity files benchmarks/labels/toxicity_{train,eval}.jsonl from the real
corpora (shared/corpora/fetch_real_corpora.sh → /work/real_corpora), deterministically.

    .venv/bin/python benchmarks/build_toxicity_labels.py [--corpora /work/real_corpora]

Labels ("toxic" / "offensive" removed; "clean" kept; see data/steps/safety.py):
  offensive  BIG-bench hinglish_toxicity examples labelled toxic ("yes"; Hinglish, language
             hi-Latn) and BIG-bench social_support examples labelled "unsupportive" (English
             Wikipedia-talk / forum replies: dismissive, insulting, sometimes obscene). These are
             the only texts labelled offensive in the corpora: the fortunes there are Debian's
             `fortunes`, `fortunes-min`, `fortunes-bofh-excuses` (no `fortunes-off`, no rot13 file).
  clean      the other examples of those two tasks; texts full of sensitive words that are not
             toxic: KJV Bible and Spurgeon's psalm commentary (religion), Shakespeare and Austen
             (fiction), the US constitution and fortunes' law.txt (law), fortunes' medicine.txt and
             dictionary entries of bodily, sexual, drug and crime words (medicine / reference),
             dictionary entries of the obscenities themselves (gcide, jargon, foldoc, devil),
             English manual pages (passages with kill, abort, dead, slave, ...), and Debian's non-offensive fortunes (Debian's own
             editorial label, even where one quotes an obscenity).
Book and manual texts are cut into passages of about PASSAGE_CHARS at blank lines; a passage is
taken when it holds a SENSITIVE word (plus every SPARE-th other passage). The split is by source
file (sha1 of its path, 1 in 3 to eval); the two BIG-bench tasks are one file each, so they are
split by example position (every 3rd example to eval) and that is stated here, not hidden.
Every record: text, label, slice (topic), source (file), kind, language.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Iterator

OUT = Path(__file__).resolve().parent / "labels"
PASSAGE_CHARS = 600
PER_FILE = 4  # passages taken per book / manual file at most
PER_DICT = 120  # entries taken per dictionary at most (evenly spread over its index)
SPARE = 40  # every SPARE-th passage without a sensitive word is taken too
# Words with innocent senses that crude lists hold (bench_toxicity_layers' "broad" list adds them).
SENSITIVE = frozenset(
    "bastard bastards whore whores whoredom harlot ass asses cock dick pussy coon dyke fag faggot faggots rape raped "
    "sex sexual anal penis vagina breast breasts kill killed killing murder murdered drug drugs damn damned hell "
    "bitch bitches shit fuck fucking suck sucks naked nude blood abortion abort die dead slave slaves".split()
)
_WORD = re.compile(r"[a-z]+")


def sensitive(text: str) -> bool:
    return bool(SENSITIVE.intersection(_WORD.findall(text.lower())))


def clip(text: str, limit: int = 900) -> str:
    """At most about `limit` characters, cut at a line end (else a space): label files stay small."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    return text[: cut if cut > limit // 2 else max(text.rfind(" ", 0, limit), limit // 2)].rstrip()


def to_eval(rel: str) -> bool:
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 3 == 0


def passages(text: str) -> Iterator[str]:
    """Runs of blank-line-separated paragraphs of about PASSAGE_CHARS."""
    cur: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        cur.append(para.strip())
        if sum(map(len, cur)) >= PASSAGE_CHARS:
            yield "\n\n".join(p for p in cur if p)
            cur = []
    if cur and any(cur):
        yield "\n\n".join(p for p in cur if p)


def pick(texts: list[str]) -> list[str]:
    """The passages with a sensitive word (at most PER_FILE) and every SPARE-th other one."""
    hot = [t for t in texts if sensitive(t)]
    step = max(1, len(hot) // PER_FILE)
    return hot[::step][:PER_FILE] + [t for i, t in enumerate(texts) if not sensitive(t) and i % SPARE == 0][:3]


def strip_roff(text: str) -> str:
    """Roff source as plain text: paragraph and section macros become blank lines, others go."""
    lines = ["" if ln.startswith((".PP", ".SH", ".SS", ".TP", ".IP", ".LP", ".P ")) else ln for ln in text.splitlines()]
    lines = [ln for ln in lines if not ln.startswith((".", "'\\\""))]
    return re.sub(r"\\f[BIRP]|\\-|\\\(..|\\&", lambda m: "-" if m.group() == "\\-" else "", "\n".join(lines))


def book_records(root: Path) -> Iterator[dict]:
    groups = [("books/bible-en-kjv", "*.txt", "religion"), ("books/spurgeon-treasury-of-david", "*.txt", "religion"),
              ("books/shakespeare", "*/*.md", "fiction"), ("books/austen", "*.txt", "fiction"),
              ("books/us-founding-documents", "*.txt", "law")]
    for folder, pattern, topic in groups:
        for path in sorted((root / folder).glob(pattern)):
            for t in pick(list(passages(path.read_text(encoding="utf-8", errors="replace")))):
                yield {"text": t, "label": "clean", "slice": topic, "source": str(path.relative_to(root)), "kind": "books"}
    for path in sorted((root / "reference/manpages/en").glob("man*/*")):
        hot = [t for t in passages(strip_roff(path.read_text(encoding="utf-8", errors="replace"))) if sensitive(t)]
        for t in hot[:2]:  # manuals: only passages with a sensitive word (kill, abort, dead, slave ...)
            yield {"text": t, "label": "clean", "slice": "manual", "source": str(path.relative_to(root)), "kind": "reference"}


def dict_entries(path: Path, index: Path) -> Iterator[tuple[str, str]]:
    """(headword, entry text) of a dictd database (.dict or dictzip .dict.gz) via its index."""
    data = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    num = lambda s: sum(b64.index(c) * 64 ** i for i, c in enumerate(reversed(s)))  # noqa: E731
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and not parts[0].startswith("00-"):
            off, size = num(parts[1]), num(parts[2])
            yield parts[0], data[off : off + size].decode("utf-8", errors="replace").strip()


def dictionary_records(root: Path) -> Iterator[dict]:
    for name in ("gcide", "jargon", "foldoc", "devil"):
        folder = root / "reference/dictd" / name
        dict_file = next(iter(sorted(folder.glob("*.dict*"))))
        seen: set[str] = set()
        found = []
        for head, text in dict_entries(dict_file, folder / f"{name}.index"):
            key = head.lower()
            if key in seen or not (key in SENSITIVE or (sensitive(text) and len(text) < 1500)) or len(text) > 3000:
                continue
            seen.add(key)
            found.append(text)
        for text in found[:: max(1, len(found) // PER_DICT)][:PER_DICT]:
            yield {"text": text, "label": "clean", "slice": "dictionary", "source": str(dict_file.relative_to(root)),
                   "kind": "reference"}


def fortune_records(root: Path) -> Iterator[dict]:
    for path in sorted((root / "short_text/fortunes/en").glob("*/*.txt")):
        topic = {"medicine.txt": "medicine", "law.txt": "law"}.get(path.name, "fortunes")
        recs = [r.strip() for r in re.split(r"\n%\n", path.read_text(encoding="utf-8", errors="replace")) if r.strip()]
        take = [r for r in recs if sensitive(r)] if topic == "fortunes" else recs
        for r in take[:30]:
            yield {"text": r, "label": "clean", "slice": topic, "source": str(path.relative_to(root)), "kind": "prose"}


def bigbench_records(root: Path) -> Iterator[tuple[int, dict]]:
    """(example position, record) of the two BIG-bench tasks with offensive labels."""
    task = root / "eval/bigbench/hinglish_toxicity/task.json"
    for i, ex in enumerate(json.loads(task.read_text())["examples"]):
        label = "toxic" if ex["target_scores"]["yes"] == 1 else "clean"
        yield i, {"text": ex["input"].strip(), "label": label, "slice": "social", "source": str(task.relative_to(root)),
                  "kind": "web", "language": "hi-Latn"}
    task = root / "eval/bigbench/social_support/task.json"
    for i, ex in enumerate(json.loads(task.read_text())["examples"]):
        label = "offensive" if ex["target_scores"]["unsupportive"] == 1 else "clean"
        yield i, {"text": ex["input"].strip(), "label": label, "slice": "social", "source": str(task.relative_to(root)),
                  "kind": "web", "language": "en"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"))
    args = ap.parse_args()
    root = args.corpora
    split: dict[str, list[dict]] = {"train": [], "eval": []}
    for rec in [*book_records(root), *dictionary_records(root), *fortune_records(root)]:
        rec.setdefault("language", "en")
        rec["text"] = clip(rec["text"])
        split["eval" if to_eval(rec["source"]) else "train"].append(rec)
    for i, rec in bigbench_records(root):
        split["eval" if i % 3 == 2 else "train"].append(rec)
    OUT.mkdir(exist_ok=True)
    for name, recs in split.items():
        path = OUT / f"toxicity_{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in recs), encoding="utf-8")
        by = {}
        for r in recs:
            by[(r["slice"], r["label"])] = by.get((r["slice"], r["label"]), 0) + 1
        print(f"{path}: {len(recs)} records, {path.stat().st_size} bytes", dict(sorted(by.items())))


if __name__ == "__main__":
    main()
