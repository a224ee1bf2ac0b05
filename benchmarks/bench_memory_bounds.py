"""Peak memory of the readers of user files, at two input sizes: does it grow with the file?

    PYTHONPATH=src python benchmarks/bench_memory_bounds.py [--quick] [--out FILE]

Each case runs in a fresh child process and its peak is that child's max RSS (os.wait4's
VmHWM, read at its exit), so nothing the parent allocated counts. Cases:
  classify   the classify step's training (Classify.prepare) on a labelled JSONL of two labels
  safety     the safety step's classifier training (Safety.prepare) on a toxic/clean JSONL
  bigbench   loading a BIG-bench task.json (eval.tasks.load_task)
  trace      `tokenmill trace RUN --file F --json` where F is one long line, on a tiny real run
The labelled cases set `max_examples` to 2,000 per label when the config has it, so both sizes
are over the cap (the default, 20,000, is over both only for larger files); the bigbench files
are both over the default 64 MiB task-file cap. An older checkout without those settings runs
the same files with what it has: that is the "before" measurement.

Writes benchmarks/results/memory_bounds.json: per case and size, the file's bytes, the child's
peak RSS in MB, its exit status and its last stderr line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402

HERE = Path(__file__).resolve().parent
MB = 1 << 20
LABEL_CAP = 2_000  # max_examples per label in the labelled cases (when the config has the setting)


def peak_of(code: str, cwd: Path) -> dict:
    """Run `python -c code` as a child; its max RSS (MB), exit status and last stderr line."""
    t = time.perf_counter()
    hwm = cwd / "vmhwm.txt"
    hook = f"import atexit\natexit.register(lambda: open({str(hwm)!r}, 'w').write(open('/proc/self/status').read()))\n"
    proc = subprocess.Popen([sys.executable, "-c", hook + code], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode("utf-8", "replace")
    _, status, _usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return {
        # VmHWM: the peak of the child's own memory. Not ru_maxrss, which Linux carries over fork
        # and exec from the parent (this script, after writing a large file, would count).
        "peak_mb": round(int(next(ln for ln in hwm.read_text().splitlines() if ln.startswith("VmHWM")).split()[1]) / 1024, 1),
        "rc": proc.returncode,
        "seconds": round(time.perf_counter() - t, 2),
        "last_stderr": lines[-1][:300] if lines else "",
    }


def labelled_file(path: Path, size: int, labels: tuple[str, str], seed: int = 0) -> int:
    """JSONL of ~2 KB texts over a 20k-word vocabulary, each label with words of its own."""
    rng = random.Random(seed)
    vocab = [f"w{i:05d}" for i in range(20_000)]
    written = 0
    with path.open("w") as fh:
        while written < size:
            label = labels[rng.randrange(2)]
            words = rng.choices(vocab, k=300) + [f"{label}{rng.randrange(50)}" for _ in range(20)]
            line = json.dumps({"text": " ".join(words), "label": label}) + "\n"
            fh.write(line)
            written += len(line)
    return written


def bigbench_file(path: Path, size: int) -> int:
    example = json.dumps({"input": "What is two plus two? " * 20, "target_scores": {"four": 1, "five": 0}})
    with path.open("w") as fh:
        fh.write('{"name": "big", "examples": [')
        n = max(1, size // (len(example) + 2))
        fh.write(", ".join([example] * n))
        fh.write("]}")
    return path.stat().st_size


def has_field(model: str, field: str) -> bool:
    from tokenmill.data import config as data_config
    from tokenmill.eval import config as eval_config

    cls = getattr(data_config, model, None) or getattr(eval_config, model)
    return field in cls.model_fields


def classify_code(path: Path, work: Path) -> str:
    extra = {"max_examples": LABEL_CAP} if has_field("ClassifierConfig", "max_examples") else {}
    c = {"name": "topic", "labelled": str(path), **extra}
    return (
        "from pathlib import Path\nfrom tokenmill.data.config import CurateConfig\n"
        "from tokenmill.data.steps.classify import Classify\n"
        f"Classify(CurateConfig(classify=[{c!r}]), Path({str(work)!r})).prepare(Path({str(work)!r}))\n"
    )


def safety_code(path: Path, work: Path) -> str:
    extra = {"max_examples": LABEL_CAP} if has_field("SafetyConfig", "max_examples") else {}
    s = {"labelled": str(path), **extra}
    return (
        "from pathlib import Path\nfrom tokenmill.data.config import CurateConfig\n"
        "from tokenmill.data.steps.safety import Safety\n"
        f"Safety(CurateConfig(safety={s!r}), Path({str(work)!r})).prepare(Path({str(work)!r}))\n"
    )


def bigbench_code(path: Path) -> str:
    t = {"name": "big", "path": str(path), "format": "bigbench"}
    return f"from tokenmill.eval.config import TaskConfig\nfrom tokenmill.eval.tasks import load_task\nload_task(TaskConfig(**{t!r}))\n"


def tiny_run(root: Path) -> Path:
    """A real run (curated text, tokenizer, token store) like tests/eval/test_trace.py's, traced
    once so the index is built before the measured trace."""
    sys.path.insert(0, str(HERE.parent))
    from tests.conftest import real_documents
    from tests.eval.test_trace import write_sourced
    from tokenmill.config import load_config
    from tokenmill.runs import RunDir
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize

    overrides = ["name=t", f"root={root}", "tokenizer.vocab_size=512", "tokenize.val_fraction=0.1"]
    overrides += [
        "tokenize.min_val_docs=1",
        "train.max_steps=40",
        "train.seq_len=64",
        "train.micro_batch=4",
        "train.grad_accum=1",
    ]
    r = RunDir.create(load_config(None, overrides))
    docs = real_documents()
    write_sourced(r.path, {"prose": docs["prose"][:12], "code": docs["code"][:2]})
    run_tokenizer(r)
    run_tokenize(r)
    subprocess.run(
        [sys.executable, "-m", "tokenmill", "trace", str(r.path), "--text", "warm up the index"], check=True, capture_output=True
    )
    return r.path


def trace_code(run: Path, path: Path) -> str:
    argv = ["tokenmill", "trace", str(run), "--file", str(path), "--json"]
    return f"import sys\nsys.argv = {argv!r}\nfrom tokenmill.cli import main\nmain()\n"


def long_line(path: Path, size: int) -> int:
    words = "the model wrote this sentence again and again without stopping "
    path.write_text((words * (size // len(words) + 1))[:size] + "\n")
    return size + 1


def measure(tmp: Path, sizes: dict[str, list[int]]) -> dict:
    out: dict = {}
    for mb in sizes["classify"]:
        f = tmp / f"topic_{mb}.jsonl"
        n = labelled_file(f, mb * MB, ("news", "recipe"))
        out.setdefault("classify", []).append({"file_mb": round(n / MB, 1), **peak_of(classify_code(f, tmp / f"cw{mb}"), tmp)})
        f.unlink()
    for mb in sizes["safety"]:
        f = tmp / f"tox_{mb}.jsonl"
        n = labelled_file(f, mb * MB, ("toxic", "clean"), seed=1)
        out.setdefault("safety", []).append({"file_mb": round(n / MB, 1), **peak_of(safety_code(f, tmp / f"sw{mb}"), tmp)})
        f.unlink()
    for mb in sizes["bigbench"]:
        f = tmp / f"task_{mb}.json"
        n = bigbench_file(f, mb * MB)
        out.setdefault("bigbench", []).append({"file_mb": round(n / MB, 1), **peak_of(bigbench_code(f), tmp)})
        f.unlink()
    run = tiny_run(tmp / "run")
    for mb in sizes["trace"]:
        f = tmp / f"outputs_{mb}.txt"
        n = long_line(f, mb * MB)
        out.setdefault("trace", []).append({"file_mb": round(n / MB, 1), **peak_of(trace_code(run, f), tmp)})
        f.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="Smaller files (a smoke run).")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "memory_bounds.json")
    ap.add_argument("--trace-mb", type=int, nargs="+", help="Sizes of trace's long line (an unbounded build: 40 MB takes GBs).")
    args = ap.parse_args()
    sizes = {"classify": [10, 40], "safety": [10, 40], "bigbench": [80, 160], "trace": [1, 4, 40]}
    if args.quick:
        sizes = {"classify": [2, 4], "safety": [2, 4], "bigbench": [70, 80], "trace": [1, 2]}
    sizes["trace"] = args.trace_mb or sizes["trace"]
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as d:
        results = measure(Path(d), sizes)
    record = {"provenance": provenance(sys.argv), "label_cap": LABEL_CAP, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for case, rows in results.items():
        for row in rows:
            print(f"{case:9s} {row['file_mb']:7.1f} MB file -> peak {row['peak_mb']:8.1f} MB  rc {row['rc']}  {row['seconds']}s")


if __name__ == "__main__":
    main()
