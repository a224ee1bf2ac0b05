"""Check a quality-signal set's text before freezing it (and, for quality_signal2.json, after):
per row, how many of its documents (clean and junk) hold U+FFFD, the replacement character a
wrong decoding leaves where a letter was. A set whose rows hold it was read in the wrong encoding.

    PYTHONPATH=src .venv/bin/python benchmarks/record.py benchmarks/results/quality_signal2_set_check.json \\
        --result /tmp/qsc.json -- benchmarks/check_quality_set.py --frozen benchmarks/frozen/quality_signal2.json \\
        --fresh /work/fresh_text_1 --corpora /work/real_corpora --json /tmp/qsc.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_quality_signal as qs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frozen", type=Path, default=qs.FROZEN)
    ap.add_argument("--fresh", type=Path)
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    frozen = json.loads(args.frozen.read_text())
    if "files_sha256" in frozen:
        qs.check_digest(args.fresh, frozen["files_sha256"])
    docs = qs.build_set(args.corpora.resolve(), frozen["evaluation"], args.fresh.resolve() if args.fresh else None)
    total, bad = Counter(d["row"] for d in docs), Counter(d["row"] for d in docs if "\ufffd" in d["text"])
    rows = {row: {"documents": n, "with_replacement_char": bad[row]} for row, n in total.items()}
    for row, r in rows.items():
        print(f"{row:24s} {r['with_replacement_char']:4d} of {r['documents']:4d} documents hold U+FFFD")
    if args.json:
        args.json.write_text(json.dumps({"frozen": str(args.frozen), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
