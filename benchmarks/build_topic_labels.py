"""Build benchmarks/labels/topic_format.jsonl: labelled passages of five formats from the real corpora.

    python benchmarks/build_topic_labels.py [--corpora /work/real_corpora] [--out benchmarks/labels/topic_format.jsonl]

The corpora are the ones shared/corpora/fetch_real_corpora.sh downloads (FILES.tsv lists them).
Five classes, each from collections whose format is not in doubt:

  book        books/austen, books/shakespeare, books/bible-en-kjv, books/bible-en-web,
              books/spurgeon-treasury-of-david (English prose and verse, Project Gutenberg texts)
  code        code/python/cpython3.11-stdlib, code/c/linux-uapi-headers, code/javascript/lodash,
              code/perl/perl5.36-modules (source files)
  manual      reference/manpages/en (roff manual pages, English)
  dictionary  reference/dictd/{devil,foldoc,gcide,jargon} (.dict files: headword entries)
  mail        pii/email-messages (RFC 822 messages: headers and bodies)

Each file is cut into passages of whole lines, about PASSAGE_CHARS characters (at most MAX_CHARS,
at least MIN_CHARS; a longer single line is cut); from each file at most ceil(PER_CLASS / files)
passages spread evenly over it are kept, then PER_CLASS spread evenly over the class. Every record
is {"text", "label", "file"}: `file` (the path under the corpora) lets a benchmark hold out whole
files (bench_classify.py). No randomness: the same corpora give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from pathlib import Path

PASSAGE_CHARS = 900
MIN_CHARS = 250
MAX_CHARS = 2000
PER_CLASS = 320

CLASSES: dict[str, tuple[str, ...]] = {
    "book": (
        "books/austen/",
        "books/shakespeare/",
        "books/bible-en-kjv/",
        "books/bible-en-web/",
        "books/spurgeon-treasury-of-david/",
    ),
    "code": (
        "code/python/cpython3.11-stdlib/",
        "code/c/linux-uapi-headers/",
        "code/javascript/lodash/",
        "code/perl/perl5.36-modules/",
    ),
    "manual": ("reference/manpages/en/",),
    "dictionary": ("reference/dictd/devil/devil.dict", "reference/dictd/foldoc/", "reference/dictd/gcide/", "reference/dictd/jargon/"),
    "mail": ("pii/email-messages/",),
}


def class_files(corpora: Path, prefixes: tuple[str, ...]) -> list[str]:
    """Paths (under the corpora, from FILES.tsv) of a class, sorted; dictd indexes are not text."""
    rows = (line.split("\t")[0] for line in (corpora / "FILES.tsv").read_text().splitlines()[1:])
    return sorted(p for p in rows if p.startswith(prefixes) and not p.endswith(".index"))


def read_text(path: Path) -> str:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.decode("utf-8", errors="replace")


def passages(text: str) -> list[str]:
    """Consecutive whole lines of about PASSAGE_CHARS characters (MIN_CHARS to MAX_CHARS)."""
    out, current, size = [], [], 0
    for line in text.replace("\r\n", "\n").split("\n"):
        line = line[:MAX_CHARS]
        if size + len(line) > MAX_CHARS and current:
            out.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
        if size >= PASSAGE_CHARS:
            out.append("\n".join(current))
            current, size = [], 0
    if current:
        out.append("\n".join(current))
    return [p.strip("\n") for p in out if len(p.strip()) >= MIN_CHARS]


def spread(items: list, k: int) -> list:
    """k items evenly spaced over the list (all of them when it is shorter)."""
    if len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else items[:1]


def build(corpora: Path) -> list[dict[str, str]]:
    records = []
    for label, prefixes in CLASSES.items():
        files = class_files(corpora, prefixes)
        per_file = math.ceil(PER_CLASS / max(1, len(files)))
        chosen = [(f, p) for f in files for p in spread(passages(read_text(corpora / f)), per_file)]
        records += [{"text": p, "label": label, "file": f} for f, p in spread(chosen, PER_CLASS)]
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "labels" / "topic_format.jsonl")
    args = ap.parse_args()
    records = build(args.corpora)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = {c: sum(r["label"] == c for r in records) for c in CLASSES}
    files = {c: len({r["file"] for r in records if r["label"] == c}) for c in CLASSES}
    print(f"{args.out}: {len(records)} passages, {args.out.stat().st_size:,} bytes; per class {counts}; files {files}")


if __name__ == "__main__":
    main()
