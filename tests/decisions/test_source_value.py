"""`tokenmill source-value`: paired and annealing runs with and without a source, Δ per slice,
a noise band over seeds and a verdict."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.decisions.optimize import MixtureOptimizeError
from tokenmill.decisions.source_value import arm_mixtures, load_source_value_config, verdict

from tests.decisions.test_optimize import _base

runner = CliRunner()


def test_arms_keep_the_other_buckets_relative_weights():
    without, with_source = arm_mixtures({"a": 3.0, "b": 1.0}, "new", 0.2)
    assert without == pytest.approx({"a": 0.75, "b": 0.25})
    assert with_source == pytest.approx({"a": 0.6, "b": 0.2, "new": 0.2})


def test_the_verdict_compares_the_transfer_with_the_seed_noise():
    # the source's own slice always improves; the verdict looks at the other slices only
    helps = verdict([{"new": -0.5, "a": -0.10, "b": -0.08}, {"new": -0.4, "a": -0.11, "b": -0.09}], "new", 2.0)
    assert helps["verdict"] == "helps" and helps["delta_other_slices"] == pytest.approx(-0.095)
    assert helps["source_slice"] == pytest.approx(-0.45)
    hurts = verdict([{"new": -0.5, "a": 0.10}, {"new": -0.4, "a": 0.12}], "new", 2.0)
    assert hurts["verdict"] == "hurts"
    noisy = verdict([{"new": -0.5, "a": 0.05}, {"new": -0.4, "a": -0.06}], "new", 2.0)
    assert noisy["verdict"] == "within noise" and noisy["noise_band"] == pytest.approx(2 * 0.0777817, rel=1e-5)


def test_source_value_runs_both_tests_from_the_cli(tmp_path, tokenized_run):
    _base(tmp_path, tokenized_run)
    cfg = {"name": "sv", "root": str(tmp_path / "out"), "base": "base.yaml", "data": str(tokenized_run.path),
           "seeds": [1, 2], "share": 0.3, "anneal_fraction": 0.3}
    (tmp_path / "sv.yaml").write_text(yaml.safe_dump(cfg))
    res = runner.invoke(app, ["source-value", str(tmp_path / "sv.yaml"), "--source", "prose"])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "out" / "sv" / "source_value.json").read_text())
    assert out["source"] == "prose" and out["without"] == {"code": 1.0}
    assert out["with"] == pytest.approx({"code": 0.7, "prose": 0.3})
    for test in ("paired", "anneal"):
        t = out["tests"][test]
        assert t["verdict"] in ("helps", "hurts", "within noise") and set(t["delta_bpb"]) == {"code", "prose"}
        wo, w = t["runs"]["without"][0], t["runs"]["with"][0]
        assert t["per_seed"][0] == pytest.approx(w["bpb"]["code"] - wo["bpb"]["code"])
        assert f"{test}: {t['verdict']}" in res.output
    # the annealing arms share their first phase and differ in the annealed mixture only
    anneal = yaml.safe_load((tmp_path / "out" / "sv" / "runs" / "anneal-with-s1" / "config.yaml").read_text())
    phases = anneal["mixture"]["phases"]
    assert [p["anneal"] for p in phases] == [False, True] and phases[0]["weights"] == {"code": 1.0}
    assert phases[1]["weights"] == pytest.approx({"code": 0.7, "prose": 0.3})
    # training on the source lowers its own held-out bpb in the paired test
    assert out["tests"]["paired"]["source_slice"] < 0
    assert (tmp_path / "out" / "sv" / "source_value.html").exists()


def test_a_source_that_is_no_bucket_is_refused(tmp_path, tokenized_run):
    _base(tmp_path, tokenized_run)
    (tmp_path / "sv.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "root": str(tmp_path / "o"),
                                                      "data": str(tokenized_run.path)}))
    with pytest.raises(MixtureOptimizeError, match="no source given"):
        load_source_value_config(tmp_path / "sv.yaml")
    res = runner.invoke(app, ["source-value", str(tmp_path / "sv.yaml"), "--source", "web"])
    assert res.exit_code == 1 and "source 'web' is not a bucket" in res.output


def test_a_source_given_as_a_path_becomes_a_new_bucket_of_its_own_store(tmp_path, tokenized_run):
    from tokenmill.config import load_config
    from tokenmill.decisions.source_value import resolve_source

    _base(tmp_path, tokenized_run)
    new = tmp_path / "My Notes"
    new.mkdir()
    (new / "a.txt").write_text("some new text")
    write = lambda **kw: (tmp_path / "sv.yaml").write_text(yaml.safe_dump({"base": "base.yaml", **kw}))
    write()
    base = load_config(tmp_path / "base.yaml", [])
    cfg = load_source_value_config(tmp_path / "sv.yaml", str(new))
    rc, bucket = resolve_source(cfg, base, tmp_path / "sv.yaml")
    assert bucket == "new-My-Notes" and rc.curate.sources[-1].path == str(new.resolve())
    assert rc.curate.sources[-1].bucket == bucket and len(rc.curate.sources) == len(base.curate.sources) + 1
    with pytest.raises(MixtureOptimizeError, match="remove `data:`"):
        write(data=str(tokenized_run.path))
        resolve_source(load_source_value_config(tmp_path / "sv.yaml", str(new)), base, tmp_path / "sv.yaml")
    write()
    res = runner.invoke(app, ["source-value", str(tmp_path / "sv.yaml"), "--source", str(tmp_path / "missing")])
    assert res.exit_code == 1 and "source path" in res.output and "does not exist" in res.output
