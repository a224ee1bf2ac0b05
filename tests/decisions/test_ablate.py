"""`tokenmill ablate` end to end on real text (Python's own docs and code): every arm curated from
the same sources, one tokenizer, one evaluation set kept out of every arm's training data,
equal tokens, paired Δ recomputable from the runs' own evaluation files, and a second call that
trains nothing again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.data.curated import curated_buckets, document_ids
from tokenmill.decisions.ablate_stats import overall

runner = CliRunner()

BASE = {
    "name": "base", "seed": 1234,
    "curate": {"sources": [{"kind": "python_stdlib", "part": "code", "bucket": "code", "max_docs": 24},
                           {"kind": "python_stdlib", "part": "reference", "bucket": "reference", "max_docs": 40}],
               "quality": {"gopher_repetition": False, "c4": False, "fineweb": False},
               "langid": {"languages": ["en"], "min_score": 0.4}, "workers": 1},
    "tokenizer": {"vocab_size": 400},
    "tokenize": {"val_fraction": 0.05, "min_val_docs": 2},
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 32},
    "train": {"seq_len": 32, "micro_batch": 4, "global_batch_tokens": 128, "device": "cpu", "dtype": "float32",
              "threads": 1, "eval_docs": 2, "ckpt_every": 0, "log_every": 0},
    "eval": {"num_samples": 0, "tasks": [{"name": "python-mc", "path": "package:tasks/python_mc.jsonl",
                                          "format": "arc", "limit": 8}]},
}


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablate")
    (root / "base.yaml").write_text(yaml.safe_dump(BASE))
    cfg = {"name": "ab", "root": str(root / "out"), "base": "base.yaml",
           "arms": {"full": {}, "raw": {"steps": ["extract", "normalize"]},
                    "no-quality": {"without": ["quality"], "note": "Gopher rules off"}},
           "sizes": [{"name": "s", "d_model": 16, "n_layers": 1, "n_heads": 2, "tokens": 640},
                     {"name": "m", "d_model": 24, "n_layers": 1, "n_heads": 2, "tokens": 1280}],
           "seeds": [1, 2], "eval": {"fraction": 0.25, "max_docs": 6}}
    (root / "ab.yaml").write_text(yaml.safe_dump(cfg))
    res = runner.invoke(app, ["ablate", str(root / "ab.yaml")])
    assert res.exit_code == 0, res.output
    out = root / "out" / "ab"
    return root, out, json.loads((out / "ablate.json").read_text()), res.output


def _ids(curated: Path) -> set[str]:
    """Ids of the kept documents (not those under _rejected/)."""
    return {i for b in curated_buckets(curated) for i in document_ids(curated, b)}


@pytest.mark.slow
def test_every_arm_shares_the_tokenizer_the_eval_set_and_the_token_budget(ablation):
    root, out, result, output = ablation
    arms = ["full", "raw", "no-quality"]
    tokenizers = {a: (out / "arms" / a / "data" / "tokenizer" / "tokenizer.json").read_bytes() for a in arms}
    assert len(set(tokenizers.values())) == 1
    probes = {r["run"]: yaml.safe_load((Path(r["run"]) / "config.yaml").read_text())["eval"]["probes"] for r in result["runs"]}
    assert len({json.dumps(p) for p in probes.values()}) == 1 and len(result["runs"]) == 3 * 2 * 2
    for size in ("s", "m"):
        assert len({r["tokens"] for r in result["runs"] if r["size"] == size}) == 1  # equal tokens
    assert result["arms"]["raw"]["steps"] == ["extract", "normalize"]
    assert "quality" not in result["arms"]["no-quality"]["steps"]
    assert "Δ bpb (all slices) against full" in output and (out / "ablate.html").is_file()


def test_no_arm_trains_on_an_evaluation_document(ablation):
    root, out, result, _ = ablation
    eval_ids = set()
    for name, s in result["eval_set"]["slices"].items():
        eval_ids |= {json.loads(line)["id"] for line in Path(s["file"]).read_text().splitlines()}
    assert eval_ids and eval_ids <= _ids(next((out / "eval").glob("source")) / "curated")
    for arm in ("full", "raw", "no-quality"):
        assert not eval_ids & _ids(out / "arms" / arm / "data" / "curated"), arm
    # raw keeps everything extract + normalize keep, so its decontamination removed every one
    report = json.loads((out / "arms" / "raw" / "data" / "curated" / "_decontamination.json").read_text())
    (stats,) = report["eval_sets"].values()
    assert stats["docs_removed"] >= len(eval_ids) and stats["max_overlap"] == 0.5


def test_paired_deltas_are_the_runs_own_evaluations(ablation):
    _, _, result, _ = ablation

    def bpb(arm, size, seed):
        (run,) = [r for r in result["runs"] if (r["arm"], r["size"], r["seed"]) == (arm, size, seed)]
        final = json.loads((Path(run["run"]) / "eval" / f"{run['steps']}.json").read_text())
        return overall(final["probes"])

    for arm in ("raw", "no-quality"):
        for size in ("s", "m"):
            got = result["deltas"][arm]["delta"]["all"][size]["per_seed"]
            assert got == pytest.approx([bpb(arm, size, s) - bpb("full", size, s) for s in (1, 2)])
    assert "task:python-mc" in result["metrics"]
    assert result["ranking"][0]["arm"] == "no-quality" and result["ranking"][0]["steps"] == ["quality"]
    assert result["headline"]["arm"] == "raw" and result["lines"]["full"] is not None


def test_a_second_call_continues_and_a_run_page_links_the_ablation(ablation):
    from tokenmill.config import load_config
    from tokenmill.report.build import render
    from tokenmill.runs import RunDir

    root, out, result, _ = ablation
    gone = Path(result["runs"][-1]["run"])
    for p in sorted(gone.rglob("*"), reverse=True):
        p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
    gone.rmdir()
    res = runner.invoke(app, ["ablate", str(root / "ab.yaml")])
    assert res.exit_code == 0, res.output
    assert res.output.count("▶ train") == 1  # only the removed run trained again
    again = json.loads((out / "ablate.json").read_text())
    assert again["deltas"]["raw"]["delta"]["all"] == result["deltas"]["raw"]["delta"]["all"]
    run = Path(result["runs"][0]["run"])
    page = render(RunDir(load_config(run / "config.yaml"), run))
    assert "../../../../ablate.html" in page and "ablate experiment" in page


def test_arms_that_differ_outside_curation_are_refused_from_the_cli(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    cfg = {"base": "base.yaml", "arms": {"full": {}, "big": {"set": ["model.d_model=64"]}},
           "sizes": [{"name": "s", "d_model": 16, "n_layers": 1, "n_heads": 2, "tokens": 640},
                     {"name": "m", "d_model": 24, "n_layers": 1, "n_heads": 2, "tokens": 1280}]}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(cfg))
    res = runner.invoke(app, ["ablate", str(tmp_path / "a.yaml")])
    assert res.exit_code != 0 and "arm 'big' changes model.d_model" in res.output


def test_arm_data_identity_is_measured_not_assumed(ablation):
    from tokenmill.decisions.ablate import same_data, tokens_digest

    _, out, result, _ = ablation
    digests = {a: tokens_digest(out / "arms" / a / "data" / "tokens") for a in result["arms"]}
    assert len(set(digests.values())) == 3  # the three arms kept different documents here
    assert all(a["same_data_as"] is None for a in result["arms"].values())
    copy = out / "copy"
    import shutil

    shutil.copytree(out / "arms" / "raw" / "data" / "tokens", copy)
    assert tokens_digest(copy) == digests["raw"]
    assert same_data({"full": "x", "raw": "y", "no-dedup": "x", "loose": "y", "cut": "z"}) == {
        "full": None, "raw": None, "no-dedup": "full", "loose": "raw", "cut": None}


@pytest.mark.slow
def test_a_sigkilled_ablation_resumes_to_the_same_results(ablation):
    """SIGKILL while it trains the runs it lacks; the next call trains only those and every paired
    Δ equals the uninterrupted ablation's (training is deterministic; finished runs are reused)."""
    import shutil
    import signal
    import subprocess
    import sys
    import time

    root, out, result, _ = ablation
    lost = [Path(r["run"]) for r in result["runs"] if r["size"] == "m" and r["seed"] == 2]
    for run in lost:
        shutil.rmtree(run)
    proc = subprocess.Popen([sys.executable, "-m", "tokenmill", "ablate", str(root / "ab.yaml")], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not lost[0].exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not (lost[-1] / ".stages" / "train.json").exists()  # killed before the last lost run finished
    res = runner.invoke(app, ["ablate", str(root / "ab.yaml")])
    assert res.exit_code == 0, res.output
    assert 1 <= res.output.count("▶ train") <= len(lost) and "▶ curate" not in res.output
    again = json.loads((out / "ablate.json").read_text())
    for arm in ("raw", "no-quality"):
        for size, ci in result["deltas"][arm]["delta"]["all"].items():
            assert again["deltas"][arm]["delta"]["all"][size]["per_seed"] == pytest.approx(ci["per_seed"])
