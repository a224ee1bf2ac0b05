"""A newcomer's first hour on their own data, scripted with the real CLI in real processes.

What a person new to tokenmill does with the README, the template and three folders of their own:
write a config from `examples/my_corpus_cpu.yaml` with three sources of different formats (WARC,
HTML, plain-text books), make one typo in the file and one on the command line, plan, run, press
Ctrl-C during training and run again, evaluate, export to Hugging Face. Every command's output is
kept, and the session is judged on what a person sees:

- the typo in the file names the file, the key and the closest valid key; the one on the command
  line names `--set`, not the file;
- `curate CONFIG` works like every other stage;
- after Ctrl-C the hint is a full command with the user's config path, and running it continues;
- `eval` prints the bits-per-byte table `run` prints; `export hf` prints the step and the files;
- nothing printed is a Python dict or a traceback;
- the plan's predicted training time is within 1.5x of the real one (training seconds from the
  run's own events, both attempts summed, so the interruption costs nothing it should not).

    .venv/bin/python benchmarks/record.py benchmarks/results/first_hour.json -- \\
        benchmarks/bench_first_hour.py --corpora ../real_corpora

`--corpora` names the fetched real corpora (web_warc, web_html/maint-guide/en, books/austen).
tests/test_first_hour.py runs the same session on a small corpus built from the standard library
with a tiny model (`smoke_settings`), so the suite checks every assertion here but the timing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DICT_REPR = re.compile(r"\{'[^'\n]{1,60}': |\[\{'|\{\"[^\"\n]{1,60}\": ")


@dataclass
class Step:
    """One command the newcomer typed: what it was, its exit code, what it printed, its seconds."""

    name: str
    argv: list[str]
    rc: int
    out: str
    seconds: float
    stdout: str = ""


@dataclass
class Session:
    """Where the session runs and everything it printed."""

    work: Path
    config: Path
    env: dict[str, str]
    steps: list[Step] = field(default_factory=list)

    def tokenmill(self, name: str, *args: str, timeout: float = 1800) -> Step:
        argv = [sys.executable, "-m", "tokenmill", *args]
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout)
        out = done.stdout + done.stderr
        step = Step(name, ["tokenmill", *args], done.returncode, out, time.perf_counter() - t0, done.stdout)
        self.steps.append(step)
        return step


def real_sources(corpora: Path) -> list[dict[str, str]]:
    """Three formats of real text written by others: a WARC archive, an HTML documentation site, books."""
    return [
        {"path": str(corpora / "web_warc"), "format": "warc", "bucket": "web", "license": "unknown"},
        {"path": str(corpora / "web_html/maint-guide/en"), "format": "html", "bucket": "docs", "license": "GPL-2.0"},
        {"path": str(corpora / "books/austen"), "format": "text", "bucket": "books", "license": "public-domain"},
    ]


def write_config(work: Path, sources: list[dict[str, str]], settings: dict[str, dict[str, object]]) -> Path:
    """The newcomer's config: the CPU template with their sources, a run root under `work`, and `settings`
    merged section by section (the smoke test shrinks the model this way)."""
    cfg = yaml.safe_load((ROOT / "examples/my_corpus_cpu.yaml").read_text())
    cfg["curate"]["sources"] = sources
    cfg["curate"].setdefault("quality", {}).pop("kinds", None)
    cfg["curate"]["quality"]["kinds"] = {"books": "books", "docs": "reference"}
    cfg["mixture"] = {}
    cfg["root"] = str(work / "runs")
    for section, values in settings.items():
        cfg.setdefault(section, {}).update(values)
    path = work / "my_corpus.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def typos(s: Session) -> None:
    """One typo in the file, one on the command line: one line each, naming where it is and what was meant."""
    bad = s.work / "my_corpus_typo.yaml"
    text = s.config.read_text().replace("max_steps:", "max_stpes:", 1)
    assert text != s.config.read_text(), "the template has no train.max_steps to misspell"
    bad.write_text(text)
    in_file = s.tokenmill("typo in the file", "train", str(bad))
    assert in_file.rc == 2, in_file.out
    assert "my_corpus_typo.yaml" in in_file.out and "max_stpes" in in_file.out and "max_steps" in in_file.out
    on_line = s.tokenmill("typo on the command line", "run", str(s.config), "--set", "train.max_stpes=3")
    assert on_line.rc == 2, on_line.out
    assert "--set" in on_line.out and "max_steps" in on_line.out, on_line.out
    assert "my_corpus.yaml: train.max_stpes" not in on_line.out, "the file is blamed for a command-line typo"


def plan_seconds(s: Session) -> float:
    """`tokenmill plan --config CONFIG --json`: the planner's predicted training seconds on this machine."""
    step = s.tokenmill("plan", "plan", "--config", str(s.config))
    assert step.rc == 0, step.out
    as_json = s.tokenmill("plan --json", "plan", "--config", str(s.config), "--json")
    assert as_json.rc == 0, as_json.out
    return float(predicted_train_seconds(json.loads(as_json.stdout)))


def predicted_train_seconds(plan: dict[str, object]) -> float:
    """The plan's predicted wall-clock of training, in seconds (on a CPU: from the steps it timed)."""
    measured = plan.get("measured")
    assert isinstance(measured, dict), f"the plan measured nothing on this CPU: {sorted(plan)}"
    return float(measured["predicted_seconds"])


def run_interrupted(s: Session, run_dir: Path) -> None:
    """`tokenmill run CONFIG`, Ctrl-C once the first checkpoint is on disk, then the hint it prints, pasted."""
    argv = [sys.executable, "-m", "tokenmill", "run", str(s.config)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=s.work, env=s.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 1800
    while not list(run_dir.glob("checkpoints/step_*/model.safetensors")) and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint in 30 minutes"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # in training: its first checkpoint is on disk, the last is not
    out, _ = proc.communicate(timeout=600)
    s.steps.append(
        Step("run, Ctrl-C in training", ["tokenmill", "run", str(s.config)], proc.returncode, out, time.perf_counter() - t0)
    )
    assert proc.returncode == 130, out
    hints = re.findall(r"`(tokenmill [^`]+)` continues", out)
    assert hints, f"no command to paste after Ctrl-C: {out}"
    assert all(str(s.config) in h for h in hints), f"a hint without the config path: {hints}"
    again = s.tokenmill("run again (resume)", "run", str(s.config))
    assert again.rc == 0, again.out
    assert "resumed" in json.dumps(events(run_dir)), "the second run did not resume from the checkpoint"


def events(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def train_seconds(run_dir: Path) -> float:
    """Training wall-clock of both attempts: from each train_start to the attempt's last train_step."""
    total, start, last = 0.0, None, None
    for e in events(run_dir):
        if e.get("kind") == "train_start":
            if start is not None and last is not None:
                total += last - start
            start, last = float(e["t"]), None  # type: ignore[arg-type]
        elif e.get("kind") == "train_step" and start is not None:
            last = float(e["t"])  # type: ignore[arg-type]
    if start is not None and last is not None:
        total += last - start
    return total


def eval_and_export(s: Session) -> None:
    """`eval` prints run's table; `export hf` prints the step and the files, all with one file mode."""
    run_out = next(x for x in reversed(s.steps) if x.name.startswith("run again")).out
    ev = s.tokenmill("eval", "eval", str(s.config))
    assert ev.rc == 0, ev.out
    assert "bits per byte" in ev.out.lower() or "bpb" in ev.out.lower(), ev.out
    # the same table: its title (the step scored) and every bucket row, whether drawn as a table or, on
    # a narrow terminal, one block per row
    title = next(line for line in run_out.splitlines() if line.startswith("held-out evaluation at step"))
    assert title in ev.out, f"eval does not print run's table: {title!r}"
    rows = [line for line in run_out[run_out.rindex(title):].splitlines() if "±" in line][:3]
    assert rows and all(row in ev.out for row in rows), f"eval's bucket rows differ from run's: {rows}"
    export = s.work / "export"
    run_dir = s.work / "runs" / yaml.safe_load(s.config.read_text())["name"]
    ex = s.tokenmill("export", "export", "hf", str(run_dir / "checkpoints"), str(export))
    assert ex.rc == 0, ex.out
    assert re.search(r"step \d+", ex.out) and "model.safetensors" in ex.out, ex.out
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in export.iterdir() if p.is_file()}
    assert len(set(modes.values())) == 1, modes


def judge_everything_printed(s: Session) -> list[str]:
    """Nothing a person reads is a Python dict or a traceback (JSON asked for with --json is for machines)."""
    problems = []
    for step in s.steps:
        if "--json" in step.argv:
            continue
        if DICT_REPR.search(step.out):
            problems.append(f"{step.name}: a Python dict: {DICT_REPR.search(step.out).group(0)!r}")  # type: ignore[union-attr]
        if "Traceback" in step.out:
            problems.append(f"{step.name}: a traceback")
    return problems


def session(work: Path, sources: list[dict[str, str]], settings: dict[str, dict[str, object]]) -> dict[str, object]:
    """The whole first hour; returns what the benchmark records (assertions fail loudly on the way)."""
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "COLUMNS": "80"}
    s = Session(work, write_config(work, sources, settings), env)
    run_dir = work / "runs" / yaml.safe_load(s.config.read_text())["name"]
    typos(s)
    predicted = plan_seconds(s)
    cur = s.tokenmill("curate CONFIG", "curate", str(s.config))
    assert cur.rc == 0, cur.out
    run_interrupted(s, run_dir)
    real = train_seconds(run_dir)
    eval_and_export(s)
    problems = judge_everything_printed(s)
    assert not problems, problems
    return {
        "predicted_train_s": round(predicted, 1),
        "real_train_s": round(real, 1),
        "ratio_real_over_predicted": round(real / predicted, 3),
        "steps": [{"name": x.name, "argv": x.argv[1:3], "rc": x.rc, "seconds": round(x.seconds, 1)} for x in s.steps],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, required=True, help="The fetched real corpora (../real_corpora).")
    ap.add_argument("--work", type=Path, default=Path("/tmp/tm-first-hour"), help="A new or empty folder.")
    args = ap.parse_args()
    if args.work.exists() and any(args.work.iterdir()):
        sys.exit(f"{args.work}: not empty; name a new folder with --work")
    result = session(args.work, real_sources(args.corpora.resolve()), {})
    ratio = float(result["ratio_real_over_predicted"])  # type: ignore[arg-type]
    result["within_1_5x"] = 1 / 1.5 <= ratio <= 1.5
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
