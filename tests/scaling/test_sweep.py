import json
from pathlib import Path

import pytest
import yaml

from tokenmill.runs import STAGES, RunDir
from tokenmill.scaling.flops import flops_per_token
from tokenmill.scaling.sweep import (SweepError, base_config, load_sweep, plan_sweep, run_config, run_sweep,
                                     shape_model)

BUDGETS = [4.0e9, 8.0e9]
SHAPES = [{"d_model": 16, "n_layers": 1}, {"d_model": 32, "n_layers": 1}, {"d_model": 64, "n_layers": 2}]
# the tests that train: a quarter of the compute (5 to 98 steps a run instead of 18 to 390; the held-out
# run 29 steps instead of 299, at a budget of its own) still gives every shape of every budget a run of its own
SMALL = [1.0e9, 2.0e9]
TRAIN = {"budgets": SMALL, "min_steps": 4, "holdout": [{"shape": {"d_model": 32, "n_layers": 1}, "flops": 1.5e9}]}


def _sweep(tmp_path: Path, data: RunDir, name: str, **extra) -> Path:
    """A sweep over `data`'s tokens: a base config with a small recipe, two budgets, three shapes."""
    base = data.config.model_dump(mode="json")
    base["model"].update(max_seq_len=32)
    base["train"].update(seq_len=32, micro_batch=4, global_batch_tokens=256, lr=0.01, device="cpu", dtype="float32",
                         threads=1, eval_every=0, eval_docs=2, ckpt_every=10, log_every=0)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    sweep = {"name": name, "root": str(tmp_path / "sweeps"), "base": "base.yaml", "data": str(data.path),
             "budgets": BUDGETS, "shapes": SHAPES, "min_steps": 8, "head_dim": 16, "min_tokens_per_param": 0,
             "holdout": [{"shape": {"d_model": 32, "n_layers": 1}, "flops": 1.6e10}], **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


@pytest.fixture()
def data_run(tokenized_run: RunDir) -> RunDir:
    for stage in STAGES[:3]:  # the fixture wrote the files without the pipeline's records
        tokenized_run.mark_done(stage)
    return tokenized_run


def test_plan_spends_each_budget_to_within_one_step_and_says_why_pairs_are_left_out(tmp_path, data_run):
    cfg = load_sweep(_sweep(tmp_path, data_run, "plan", max_tokens_per_param=20))
    base = base_config(cfg)
    runs, skipped = plan_sweep(cfg, base, vocab_size=512, train_tokens=10**9)
    tps = 256
    for r in runs:
        per_token = flops_per_token(shape_model(base, cfg.shapes[0].model_copy(
            update={"d_model": r.d_model, "n_layers": r.n_layers}), cfg.head_dim, 512), 32)
        assert r.tokens == r.steps * tps and r.flops == pytest.approx(r.tokens * per_token)
        assert r.budget <= r.flops < r.budget + tps * per_token  # the budget, rounded up to whole steps
    assert {r.role for r in runs} == {"sweep", "holdout"}
    assert all(s["why"].startswith(("D/N", "only")) or "steps" in s["why"] for s in skipped)
    assert any("D/N" in s["why"] for s in skipped)  # the smallest model at the largest budget
    _, few = plan_sweep(cfg, base, vocab_size=512, train_tokens=1000)
    assert any("epoch" in s["why"] for s in few)
    wide = cfg.model_copy(update={"min_tokens_per_param": 1.0})
    kept, left = plan_sweep(wide, base, vocab_size=512, train_tokens=10**9)
    assert all(r.tokens >= r.params for r in kept if r.role == "sweep")
    assert {s["name"] for s in left if "< min_tokens_per_param" in s["why"]} == \
        {r.name for r in runs if r.role == "sweep" and r.tokens < r.params}


def test_sweep_trains_normal_runs_collects_results_and_continues_where_it_stopped(tmp_path, data_run):
    whole = run_sweep(_sweep(tmp_path, data_run, "whole", **TRAIN))
    assert whole["finished"] == whole["planned"] == 7
    sweep_dir = tmp_path / "sweeps" / "whole"
    results = json.loads((sweep_dir / "results.json").read_text())["runs"]
    for r in results:
        run_dir = sweep_dir / "runs" / r["name"]
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert (cfg["model"]["d_model"], cfg["model"]["n_layers"], cfg["train"]["max_steps"]) == \
            (r["d_model"], r["n_layers"], r["steps"])
        assert (run_dir / "tokens").is_symlink() and (run_dir / "tokens" / "_meta.json").exists()
        record = json.loads((run_dir / "eval" / f"{r['steps']}.json").read_text())["buckets"]
        nll = sum(b["loss"] * b["tokens"] for b in record.values())
        assert r["loss"] == pytest.approx(nll / sum(b["tokens"] for b in record.values()), rel=1e-12)
    by_budget = {}
    for r in results:
        by_budget.setdefault(r["budget"], []).append(r["loss"])
    assert all(len(v) == 3 for b, v in by_budget.items() if b in SMALL)

    # in two calls (one run first, the rest later): the same results, to the bit
    path = _sweep(tmp_path, data_run, "parts", **TRAIN)
    first = run_sweep(path, only=[results[0]["name"]])
    assert first["finished"] == 1
    run_sweep(path)
    parts = json.loads((tmp_path / "sweeps" / "parts" / "results.json").read_text())["runs"]
    assert [(r["name"], r["loss"]) for r in parts] == [(r["name"], r["loss"]) for r in results]
    ckpt = sorted((tmp_path / "sweeps" / "parts" / "runs" / results[0]["name"] / "checkpoints").glob("step_*"))
    mtime = ckpt[-1].stat().st_mtime
    run_sweep(path)  # everything finished: nothing retrains
    assert ckpt[-1].stat().st_mtime == mtime


def test_bad_sweeps_name_the_problem(tmp_path, data_run):
    path = _sweep(tmp_path, data_run, "bad")
    cfg = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**cfg, "data": str(tmp_path / "nowhere")}))
    with pytest.raises(SweepError, match="not a run directory"):
        run_sweep(path)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"base": "missing.yaml", "budgets": [1e9], "shapes": SHAPES}))
    with pytest.raises(SweepError, match="missing.yaml"):
        load_sweep(tmp_path / "b.yaml")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "budgets": [1e9], "shapez": SHAPES}))
    with pytest.raises(SweepError, match="c.yaml"):
        load_sweep(tmp_path / "c.yaml")


def test_a_diverged_run_is_recorded_and_the_sweep_goes_on(tmp_path, data_run):
    path = _sweep(tmp_path, data_run, "nan")
    base = yaml.safe_load((tmp_path / "base.yaml").read_text())
    base["train"]["guard"]["enabled"] = False
    base["train"]["faults"]["nan_steps"] = [3]  # a NaN loss with the guard off: TrainingDiverged
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    out = run_sweep(path)
    assert out["finished"] == 0 and len(out["failed"]) == out["planned"] == 7
    saved = json.loads((tmp_path / "sweeps" / "nan" / "results.json").read_text())
    assert saved["runs"] == [] and all("diverged at step 3" in f["why"] for f in saved["failed"])


def test_width_rule_repeats_and_threads_in_the_plan(tmp_path, data_run):
    seed = data_run.config.seed
    path = _sweep(tmp_path, data_run, "rule", lr_base_width=32, lr_width_exponent=0.5, jobs=2,
                  repeats=[{"shape": {"d_model": 32, "n_layers": 1}, "flops": 4.0e9, "seeds": [seed, 7]}])
    cfg = load_sweep(path)
    base = base_config(cfg)
    runs, _ = plan_sweep(cfg, base, vocab_size=512, train_tokens=10**9)
    for r in runs:
        assert r.lr == pytest.approx(0.01 * (r.d_model / 32) ** -0.5)
    repeats = [r for r in runs if r.role == "repeat"]
    assert [(r.name, r.seed) for r in repeats] == [("repeat4.0e09-d32-l1-s1234", seed), ("repeat4.0e09-d32-l1-s7", 7)]
    twin = next(r for r in runs if r.role == "sweep" and r.name == "c4.0e09-d32-l1")
    assert (twin.tokens, twin.steps, twin.params) == (repeats[0].tokens, repeats[0].steps, repeats[0].params)
    rc = run_config(base, cfg, repeats[1], tmp_path)
    assert (rc.train.seed, rc.train_seed, rc.train.lr, rc.train.threads) == (7, 7, repeats[1].lr, 1)
    assert run_config(base, cfg, twin, tmp_path).train_seed == seed  # no train.seed: the run seed
    base.model.mup = True
    with pytest.raises(SweepError, match="mup"):
        plan_sweep(cfg, base, vocab_size=512, train_tokens=10**9)


@pytest.mark.slow
def test_parallel_jobs_train_the_same_runs_as_one_at_a_time(tmp_path, data_run):
    """Two worker processes (one thread each) give bit-identical losses to the runs trained one after
    the other with one thread; a repeat with the run seed equals its sweep run, another seed differs."""
    seed = data_run.config.seed
    extra = {"budgets": [1.0e9], "holdout": [], "min_steps": 4,  # 5 to 49 steps a run: cheap, still 5 runs
             "repeats": [{"shape": {"d_model": 32, "n_layers": 1}, "flops": 1.0e9, "seeds": [seed, 7]}]}
    serial = run_sweep(_sweep(tmp_path, data_run, "serial", **extra))
    parallel = run_sweep(_sweep(tmp_path, data_run, "parallel", jobs=2, **extra))
    assert serial["finished"] == parallel["finished"] == 5 and not parallel["failed"]
    loss = {}
    for name in ("serial", "parallel"):
        runs = json.loads((tmp_path / "sweeps" / name / "results.json").read_text())["runs"]
        loss[name] = {r["name"]: r["loss"] for r in runs}
    assert loss["serial"] == loss["parallel"]
    s = loss["serial"]
    assert s["repeat1.0e09-d32-l1-s1234"] == s["c1.0e09-d32-l1"]
    assert s["repeat1.0e09-d32-l1-s7"] != s["c1.0e09-d32-l1"]


@pytest.mark.slow
def test_no_holdout_leaves_the_held_out_runs_for_later(tmp_path, data_run):
    # one small budget (a run for each of the three shapes, 5 to 49 steps) and a small held-out run:
    # which runs a call trains does not depend on their length
    small = {"budgets": [1.0e9], "min_steps": 4, "holdout": TRAIN["holdout"]}
    path = _sweep(tmp_path, data_run, "later", **small)
    first = run_sweep(path, holdout=False)
    results = json.loads((tmp_path / "sweeps" / "later" / "results.json").read_text())["runs"]
    assert first["finished"] == 3 and {r["role"] for r in results} == {"sweep"}
    second = run_sweep(path)
    assert second["finished"] == second["planned"] == 4
