import json
import math

import pytest
import yaml

from tokenmill.runs import STAGES
from tokenmill.scaling.lr_transfer import analyse, best_lr, run_lr_transfer


def test_best_lr_is_the_vertex_of_the_parabola_in_log2_lr():
    lrs = [2.0 ** k for k in range(-12, -5)]
    true = -8.6  # a loss that is exactly quadratic in log2(lr): the vertex is recovered off the grid
    losses = [3.0 + 0.1 * (math.log2(lr) - true) ** 2 for lr in lrs]
    out = best_lr(lrs, losses)
    assert out["grid_lr"] == 2.0 ** -9 and not out["edge"]
    assert math.log2(out["lr"]) == pytest.approx(true, abs=1e-9)
    edge = best_lr(lrs, sorted(losses))  # still falling at the smallest lr: the optimum may be below the grid
    assert edge["edge"] and edge["lr"] == edge["grid_lr"] == lrs[0]
    assert best_lr(lrs[:3], [float("inf")] * 3)["lr"] is None  # every run diverged
    assert best_lr(lrs[:3], [None, 2.0, None])["grid_lr"] == lrs[1]  # a diverged run (None) never wins


def test_analysis_measures_the_shift_of_the_optimum_in_octaves():
    lrs = [2.0 ** k for k in range(-10, -4)]
    rows = []
    for width, centre in ((64, -7.0), (256, -9.0)):
        rows += [{"param": "sp", "width": width, "lr": lr, "loss": (math.log2(lr) - centre) ** 2} for lr in lrs]
        rows += [{"param": "mup", "width": width, "lr": lr, "loss": (math.log2(lr) + 7.0) ** 2} for lr in lrs]
    a = analyse(rows)
    assert a["sp"]["shift_octaves"] == pytest.approx(-2.0)
    assert a["mup"]["shift_octaves"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
def test_lr_transfer_trains_each_grid_point_as_a_run_with_mup_at_the_narrowest_base(tmp_path, tokenized_run):
    for stage in STAGES[:3]:
        tokenized_run.mark_done(stage)
    base = tokenized_run.config.model_dump(mode="json")
    base["model"].update(max_seq_len=32)
    base["train"].update(seq_len=32, micro_batch=4, global_batch_tokens=128, device="cpu", dtype="float32",
                         threads=1, eval_every=0, eval_docs=2, ckpt_every=0, log_every=0, warmup_steps=2)
    base["train"]["guard"]["enabled"] = False  # so that lr 1e4 diverges at once (NaN) instead of rolling back
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    cfg = {"name": "t", "root": str(tmp_path / "sw"), "base": "base.yaml", "data": str(tokenized_run.path),
           "widths": [16, 32], "n_layers": 1, "n_heads": 2, "lrs": [1e-3, 1e-2, 1e-1, 1e4], "tokens": 1280}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
    out = run_lr_transfer(tmp_path / "t.yaml")
    assert len(out["runs"]) == 16 and set(out["analysis"]) == {"mup", "sp"}
    blown = [r for r in out["runs"] if r["lr"] == 1e4]
    assert all(r["diverged"] and r["loss"] is None for r in blown)  # recorded, and the sweep went on
    assert all(o["grid_lr"] != 1e4 for a in out["analysis"].values() for o in a["optima"].values())
    run = tmp_path / "sw" / "t" / "runs" / "mup-w32-lr1.00e-02"
    rc = yaml.safe_load((run / "config.yaml").read_text())
    assert rc["model"]["mup"] and rc["model"]["mup_base_width"] == 16 and rc["train"]["lr"] == 0.01
    assert not yaml.safe_load((tmp_path / "sw" / "t" / "runs" / "sp-w32-lr1.00e-02" / "config.yaml").read_text())["model"]["mup"]
    assert json.loads((tmp_path / "sw" / "t" / "results.json").read_text())["runs"] == out["runs"]
    assert all(r["loss"] < math.log(512) for r in out["runs"] if not r["diverged"])  # the others learned something
