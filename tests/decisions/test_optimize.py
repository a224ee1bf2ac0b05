"""`tokenmill mixture optimize` end to end on a real (small) token store, and its config errors."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.config import MixtureConfig
from tokenmill.decisions.optimize import (MixtureOptimizeError, baseline_weights, check_weights,
                                        load_optimize_config, run_optimize)
from tokenmill.runs import STAGES

runner = CliRunner()


def _base(tmp_path, tokenized_run):
    for stage in STAGES[:3]:
        tokenized_run.mark_done(stage)
    base = tokenized_run.config.model_dump(mode="json")
    base["model"].update(d_model=32, n_layers=1, n_heads=2, max_seq_len=32)
    base["train"].update(seq_len=32, micro_batch=4, global_batch_tokens=128, max_tokens=1280, device="cpu",
                         dtype="float32", threads=1, eval_every=0, eval_docs=2, ckpt_every=0, log_every=0,
                         warmup_steps=2)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))


def _write(tmp_path, **over):
    cfg = {"name": "m", "root": str(tmp_path / "out"), "base": "base.yaml", "data": None,
           "proxy": {"d_model": 16, "n_layers": 1, "n_heads": 2, "tokens": 1280},
           "doremi": {"rows_per_bucket": 2}, "regmix": {"mixtures": 4, "candidates": 2000},
           "compare": {"mixtures": ["uniform", "proportional", "doremi", "regmix"], "seeds": [1], "eval_docs": 2}}
    cfg.update(over)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "m.yaml"


@pytest.mark.slow
def test_optimize_writes_usable_weights_and_measures_every_candidate(tmp_path, tokenized_run):
    _base(tmp_path, tokenized_run)
    path = _write(tmp_path, data=str(tokenized_run.path))
    threads = torch.get_num_threads()
    res = runner.invoke(app, ["mixture", "optimize", str(path)])
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == threads  # train.threads (1) applied to the proxies, then put back
    out = tmp_path / "out" / "m"
    optimized = yaml.safe_load((out / "mixture" / "optimized.yaml").read_text())
    weights = MixtureConfig.model_validate(optimized["mixture"]).weights  # a valid mixture section
    assert set(weights) == {"code", "prose"} and sum(weights.values()) == pytest.approx(1.0, abs=1e-5)
    result = json.loads((out / "optimize.json").read_text())
    assert result["chosen"] in ("doremi", "regmix") and weights == pytest.approx(result[result["chosen"]]["weights"], abs=1e-6)
    # the chosen method is the one with the lowest measured mean held-out bpb
    measured = {m: result["compare"][m]["mean_bpb"] for m in ("doremi", "regmix")}
    assert result["chosen"] == min(measured, key=measured.get)
    for name, c in result["compare"].items():
        run = c["runs"][0]
        assert run["run"].startswith(str(tmp_path / "out" / "m" / "runs" / f"compare-{name}-")) and run["run"].endswith("-s1")
        rc = yaml.safe_load((tmp_path / "out" / "m" / "runs" / run["run"].rsplit("/", 1)[1] / "config.yaml").read_text())
        assert rc["mixture"]["weights"] == pytest.approx(c["weights"]) and rc["train"]["seed"] == 1
        assert run["mean_bpb"] == pytest.approx(sum(run["bpb"].values()) / 2)
    paired = result["compare"]["doremi"]["paired"]["uniform"]
    assert paired["per_seed"] == [pytest.approx(result["compare"]["doremi"]["runs"][0]["mean_bpb"]
                                                - result["compare"]["uniform"]["runs"][0]["mean_bpb"])]
    assert "uniform" not in result["compare"]["uniform"]["paired"]
    assert result["compare"]["proportional"]["weights"] == pytest.approx(baseline_weights("proportional", result["available_tokens"]))
    regmix = result["regmix"]
    assert len(regmix["runs"]) == 4 and regmix["runs"][0]["weights"] == {"code": 0.5, "prose": 0.5}
    assert set(regmix["fits"]) == {"code", "prose"}
    # no bucket above max_epochs (4) over the base run's 1280 tokens: the regmix weights stay under the cap
    assert all(regmix["weights"][b] <= regmix["upper"][b] + 1e-9 for b in regmix["weights"])
    assert regmix["upper"]["prose"] == pytest.approx(4 * result["available_tokens"]["prose"] / 1280)
    ep = result["compare"]["uniform"]["epochs"]
    assert ep["code"] == pytest.approx(0.5 * 1280 / result["available_tokens"]["code"])
    assert (out / "mixture.html").read_text().count("<h2>") == 4 and "regmix" in res.output and "optimized.yaml" in res.output
    # a second call trains nothing again: every run is finished
    before = {p: p.stat().st_mtime for p in (out / "runs").glob("*/events.jsonl")}
    assert run_optimize(path)["chosen"] == result["chosen"]
    assert {p: p.stat().st_mtime for p in (out / "runs").glob("*/events.jsonl")} == before
    # DoReMi's record is tied to its settings: another step size trains it again (and only it)
    first = json.loads((out / "doremi.json").read_text())
    path = _write(tmp_path, data=str(tokenized_run.path), doremi={"rows_per_bucket": 2, "step_size": 5.0})
    again = run_optimize(path)
    assert again["doremi"]["settings"]["doremi"]["step_size"] == 5.0 != first["settings"]["doremi"]["step_size"]
    assert again["doremi"]["proxy"]["weights"] != first["proxy"]["weights"]
    assert all(p.stat().st_mtime == t for p, t in before.items() if "doremi" not in p.parent.name)


def test_bad_configs_name_the_problem(tmp_path, tokenized_run):
    _base(tmp_path, tokenized_run)
    with pytest.raises(MixtureOptimizeError, match="compare.mixtures names \\['regmix'\\]"):
        load_optimize_config(_write(tmp_path, methods=["doremi"]))
    with pytest.raises(MixtureOptimizeError, match="nope"):
        load_optimize_config(_write(tmp_path, nope=1))  # unknown key
    with pytest.raises(MixtureOptimizeError, match="must sum to 1, got 0.9"):
        check_weights({"code": 0.5, "prose": 0.4}, {"code": 10, "prose": 10}, "doremi.reference")
    with pytest.raises(MixtureOptimizeError, match="bucket\\(s\\) \\['web'\\] that are not in the token store"):
        check_weights({"web": 1.0}, {"code": 10, "prose": 10}, "doremi.reference")
    assert check_weights({"code": 1.0}, {"code": 10, "prose": 10}, "w") == {"code": 1.0, "prose": 0.0}
    res = runner.invoke(app, ["mixture", "optimize", str(_write(tmp_path, data=str(tokenized_run.path),
                                                                  buckets=["code", "web"]))])
    assert res.exit_code == 1 and "['web'] are not in the token store" in res.output
    res = runner.invoke(app, ["mixture", "optimize", str(_write(tmp_path, data=str(tmp_path / "missing")))])
    assert res.exit_code == 1 and "not a run directory" in res.output


def test_the_choice_is_confirmed_on_seeds_it_did_not_see(tmp_path, tokenized_run):
    _base(tmp_path, tokenized_run)
    path = _write(tmp_path, data=str(tokenized_run.path), methods=["doremi"],
                  compare={"mixtures": ["uniform", "doremi"], "seeds": [1], "confirm_seeds": [2, 3], "eval_docs": 2})
    result = run_optimize(path)
    out = tmp_path / "out" / "m"
    conf = json.loads((out / "confirm.json").read_text())
    assert conf == result["confirm"] and conf["chosen"] == result["chosen"] == "doremi"
    assert set(conf["runs"]) == {"doremi", "uniform"}
    assert all([r["seed"] for r in rows] == [2, 3] for rows in conf["runs"].values())  # fresh seeds only
    assert [r["seed"] for r in result["compare"]["doremi"]["runs"]] == [1]  # the choice saw seed 1 alone
    deltas = [a["mean_bpb"] - b["mean_bpb"] for a, b in zip(conf["runs"]["doremi"], conf["runs"]["uniform"])]
    assert conf["paired"]["uniform"]["per_seed"] == pytest.approx(deltas)
    assert "# confirmed on fresh seeds [2, 3]: paired Δ bpb doremi − uniform" in (out / "mixture" / "optimized.yaml").read_text()
    from tokenmill.report.mixture_page import render_mixture_page

    assert "<h2>Confirmed on fresh seeds</h2>" in render_mixture_page(result, "m")
    with pytest.raises(MixtureOptimizeError, match="confirm_seeds \\[1\\] are also in seeds"):
        load_optimize_config(_write(tmp_path, methods=["doremi"],
                                    compare={"mixtures": ["uniform", "doremi"], "seeds": [1], "confirm_seeds": [1, 4]}))
