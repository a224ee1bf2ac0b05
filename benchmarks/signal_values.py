"""After a quality-signal judgement is scored: the distribution of one model_quality signal per
document kind, read back from the scored run's output (kept and removed rows), to say how far its
cut sat from what it judged. Reads only; run it after the score, never while designing.

    PYTHONPATH=src .venv/bin/python benchmarks/record.py benchmarks/results/quality_signal3_nonword_values.json \\
        --result /tmp/sv.json -- benchmarks/signal_values.py --run /tmp/qs3-new/b_reference/curated \\
        --signal nonword_frac --json /tmp/sv.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a scored run's curated folder")
    ap.add_argument("--signal", required=True, help="a model_quality field")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    values: dict[str, list[float]] = defaultdict(list)
    measured: dict[str, int] = defaultdict(int)
    for part in sorted(args.run.glob("*/*.parquet")):
        for r in pq.read_table(part, columns=["metadata", "model_quality"]).to_pylist():
            kind = json.loads(r["metadata"])["id"].split("/")[0]
            measured[kind] += 1
            v = (r["model_quality"] or {}).get(args.signal)
            if v is not None:
                values[kind].append(v)
    out = {}
    for kind, vs in sorted(values.items()):
        vs.sort()
        out[kind] = {"rows": measured[kind], "measured": len(vs),
                     **{f"q{q}": round(vs[int(q * (len(vs) - 1))], 4) for q in QUANTILES}}
        print(kind, out[kind])
    if args.json:
        args.json.write_text(json.dumps({"signal": args.signal, "kinds": out}, indent=1))


if __name__ == "__main__":
    main()
