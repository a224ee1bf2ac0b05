"""Throughput of the per-document steps normalize, url, langid, safety, pii and bucket on real text.

Documents: plain-text files of /work/real_corpora (books, man-page translations, Debian docs,
CPython code), each file one document. Every step runs alone on the same documents, in one
process (one core), after a warm-up; reported as documents/s and MB/s of text.

    python benchmarks/bench_doc_steps.py [--max-docs 2000] [--max-chars 50000]
"""

from __future__ import annotations

import argparse
import copy
import glob
import time
from pathlib import Path

from tokenmill.config import CurateConfig
from tokenmill.data.steps.bucketing import Bucket
from tokenmill.data.document import Doc
from tokenmill.data.steps.langid import LangId
from tokenmill.data.steps.normalize import Normalize
from tokenmill.data.steps.pii import Pii
from tokenmill.data.steps.safety import Safety
from tokenmill.data.steps.urlfilter import UrlFilter

ROOT = Path("/work/real_corpora")
PATTERNS = ("books/**/*.txt", "reference/doc-sources/**/*.txt", "reference/doc-sources/**/*.rst",
            "short_text/fortunes/**/*.txt", "pii/debian-changelogs/*", "code/python/cpython3.11-stdlib/**/*.py")


def documents(max_docs: int, max_chars: int) -> list[Doc]:
    files = sorted(f for p in PATTERNS for f in glob.glob(str(ROOT / p), recursive=True) if Path(f).is_file())
    step = max(1, len(files) // max_docs)
    docs = []
    for i, f in enumerate(files[::step][:max_docs]):
        text = Path(f).read_text(encoding="utf-8", errors="replace")[:max_chars]
        fmt = "code" if f.endswith(".py") else "text"
        docs.append(Doc(id=str(i), text=text, source="bench", url=f"https://www.example.org/{i}",
                        bucket="code" if fmt == "code" else "web", license="l", format=fmt))
    return docs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-docs", type=int, default=2000)
    ap.add_argument("--max-chars", type=int, default=50_000)
    args = ap.parse_args()
    docs = documents(args.max_docs, args.max_chars)
    mb = sum(len(d.text.encode("utf-8")) for d in docs) / 1e6
    cfg = CurateConfig(bucket_rules=[{"bucket": "org", "domain": "*.org"}], langid={"skip_buckets": []},
                       safety={"skip_buckets": []})
    steps = [("normalize (mojibake off)", Normalize(CurateConfig(normalize={"fix_mojibake": False}))),
             ("normalize (mojibake on)", Normalize(cfg)), ("url", UrlFilter(cfg)), ("langid", LangId(cfg)),
             ("safety", Safety(cfg)), ("pii", Pii(cfg)), ("bucket", Bucket(cfg))]
    print(f"{len(docs)} documents, {mb:.1f} MB of text")
    for name, step in steps:
        step.setup(Path("."))
        batch = [copy.copy(d) for d in docs]
        for d in batch[:20]:  # warm-up
            step.process(copy.copy(d))
        t0 = time.perf_counter()
        for d in batch:
            if step.applies(d):
                step.process(d)
        dt = time.perf_counter() - t0
        print(f"{name:26s} {len(docs) / dt:10.0f} docs/s {mb / dt:8.1f} MB/s")


if __name__ == "__main__":
    main()
