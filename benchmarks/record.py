"""Run a benchmark script and write its result with how it was made: the commit (and whether the
tree was dirty), the exact command, the versions, the machine, and the load other processes put
on the cores while it ran (benchmarks/provenance.py). Any script that prints its result as a
JSON object last (or writes it to a file given with --result) gets these fields without knowing
about them.

    .venv/bin/python benchmarks/record.py benchmarks/results/tokenize.json -- \\
        benchmarks/bench_tokenize.py --run runs/demo --cores 1 2
    .venv/bin/python benchmarks/record.py OUT.json --result /tmp/r.json -- benchmarks/bench_x.py --json /tmp/r.json

The script's own output still streams to the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from provenance import LoadSampler, provenance  # noqa: E402


def last_json(stdout: str) -> dict[str, Any]:
    """The JSON object a script printed last (its result), after any progress lines."""
    for start in [i + 1 for i in range(len(stdout) - 1, -1, -1) if stdout[i] == "\n" and stdout[i + 1:i + 2] == "{"] + [0]:
        try:
            value = json.loads(stdout[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object at the end of the output")


def run_recorded(script: list[str], result_file: Path | None = None, echo: bool = True) -> dict[str, Any]:
    """Run `python SCRIPT ARGS...` under the load sampler; its result and the provenance fields."""
    cmd = [sys.executable, *script]
    prov = provenance(argv=["python", *script])
    lines: list[str] = []
    t0 = time.time()
    with LoadSampler(interval=2.0) as load:  # rooted here: the script and its children are ours
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if echo:
                sys.stdout.write(line)
        rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}")
    result = json.loads(result_file.read_text()) if result_file else last_json("".join(lines))
    return {**prov, "seconds": round(time.time() - t0, 1), "load": load.summary(), "result": result}


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(record.py's own options, the script and its arguments): everything after the first "--"
    is the script's, so `OUT --result R -- SCRIPT ...` works in any order before it (an argparse
    REMAINDER positional would swallow the --result that follows OUT)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="record.py OUT [--result R] -- SCRIPT [ARGS...]")
    ap.add_argument("out", type=Path, help="the results file to write")
    ap.add_argument("--result", type=Path, help="the script writes its result JSON here (default: its last stdout object)")
    if "--" not in argv:
        ap.error("give the script after --")
    cut = argv.index("--")
    script = argv[cut + 1:]
    if not script:
        ap.error("give the script after --")
    return ap.parse_args(argv[:cut]), script


def main() -> None:
    args, script = parse(sys.argv[1:])
    record = run_recorded(script, args.result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str))
    print(f"recorded {args.out}")


if __name__ == "__main__":
    main()
