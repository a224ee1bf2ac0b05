"""The trainer's early-warning signals (train.health, issue 30) on real tiny runs: logged where
they belong, training bit-identical with them on or off, their state exact across a resume.
(A file of its own beside test_trainer.py: the wiring is a few lines of trainer.py.)"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tokenmill.config import RunConfig
from tokenmill.runs import RunDir, read_events
from tokenmill.train.trainer import run_train

OFF = {"activation_stats_every": 0, "bucket_loss": False, "drift_window": 0}
ON = {"activation_stats_every": 3, "bucket_loss": True, "drift_window": 8, "drift_ratio": 1.05,
      "collapse_ratio": 1.01}


def events(run: RunDir, kind: str) -> list[dict]:
    return [e for e in read_events(run.path / "events.jsonl") if e["kind"] == kind]


def variant(run: RunDir, name: str, health: dict, **train) -> RunDir:
    data = run.config.model_dump()
    data["train"].update(train, health=health)
    made = RunDir.create(RunConfig.model_validate(data), run.path.parent / name)  # tokenmill's run dir first
    shutil.copytree(run.path / "tokens", made.path / "tokens")
    return made


def tensors(path) -> dict[str, torch.Tensor]:
    out = {f"model.{k}": v for k, v in load_file(str(path / "model.safetensors")).items()}
    optim = torch.load(path / "optim.pt", weights_only=True)
    for i, state in optim["state"].items():
        out.update({f"optim.{i}.{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)})
    return out


def test_signals_are_logged_and_training_is_bit_identical_with_them(tiny_run):
    on = variant(tiny_run, "on", ON, spectrum_every=5)
    off = variant(tiny_run, "off", OFF, spectrum_every=5)
    run_train(on, progress=False)
    run_train(off, progress=False)
    got, ref = events(on, "train_step"), events(off, "train_step")
    assert [e["loss"] for e in got] == [e["loss"] for e in ref]
    assert [e["grad_norm"] for e in got] == [e["grad_norm"] for e in ref]
    a, b = tensors(on.path / "checkpoints" / "step_30"), tensors(off.path / "checkpoints" / "step_30")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # weights and Adam moments
    assert not any({"bucket_loss", "act_rms", "attn_logit_max"} & set(e) for e in ref)
    assert not events(off, "grad_drift")

    n_layers = on.config.model.n_layers
    for e in got:
        losses = e["bucket_loss"]
        assert set(losses) <= {"a", "b"} and losses
        # the step's loss is the token-weighted mean of the bucket losses: between them
        assert min(losses.values()) - 1e-6 <= e["loss"] <= max(losses.values()) + 1e-6
        probed = e["step"] % 3 == 0
        assert ("act_rms" in e) == probed == ("attn_logit_max" in e)
        if probed:
            assert len(e["act_rms"]) == len(e["attn_logit_max"]) == n_layers
            assert all(v > 0 for v in e["act_rms"])
    collapse = events(on, "embedding_collapse")
    assert len(collapse) == 1 and collapse[0]["step"] == 5 and collapse[0]["sv_ratio"] >= 1.01  # once per episode
    spectrum = {e["step"]: e["sv_ratio"] for e in events(on, "embedding_spectrum")}
    assert collapse[0]["sv_ratio"] == spectrum[5]


def test_drift_and_collapse_warnings_and_state_are_exact_across_a_resume(tiny_run):
    # spectrum at 10, 20, 30: the alert fires at 10, just after the step-10 checkpoint was taken
    ref = variant(tiny_run, "ref", ON, eval_every=5, spectrum_every=10)
    run_train(ref, progress=False)
    drifts = events(ref, "grad_drift")
    assert drifts and all({"group", "ratio", "window", "baseline_window", "growth_per_1k_steps"} <= set(e)
                          for e in drifts)
    assert len({(e["group"], e["step"]) for e in drifts}) == len(drifts)

    assert [e["step"] for e in events(ref, "embedding_collapse")] == [10]
    crashing = variant(tiny_run, "crash", ON, eval_every=5, spectrum_every=10)

    def crash(step, model):
        if step == 15:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated"):
        run_train(crashing, on_eval=crash, progress=False)
    run_train(crashing, resume=True, progress=False)
    resumed_at = events(crashing, "resumed")[0]["step"]
    assert resumed_at == 10
    after = events(crashing, "grad_drift")[len([d for d in drifts if d["step"] <= 15]):]  # the resumed process's
    assert after and [{k: v for k, v in e.items() if k != "t"} for e in after] == \
           [{k: v for k, v in e.items() if k != "t"} for e in drifts if e["step"] > resumed_at]
    assert [e["step"] for e in events(crashing, "embedding_collapse")] == [10]  # not again at 20 after the resume
    state = [json.loads((r.path / "checkpoints" / "step_30" / "state.json").read_text())["health"] for r in (ref, crashing)]
    assert state[0] == state[1] and state[0]["grad_drift"]["groups"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_ranks_log_the_one_process_signals(tmp_path, mode):
    """2 ranks x grad_accum 1 == 1 process x grad_accum 2 (the same 512-token global batch): the
    bucket losses are the global batch's (sums and counts reduced over the ranks), and the probe,
    run by every rank on its own first micro-batch (rank 0's is the one process's micro 0), runs
    on the DDP inner model and on the FSDP2-sharded one alike; rank 0 logs it."""
    from tests.train.dist_helpers import events as dist_events
    from tests.train.dist_helpers import make_run
    from tests.train.test_distributed import FSDP_RTOL, cli_train

    health = {"activation_stats_every": 4, "drift_window": 8, "drift_ratio": 1.05}
    single = make_run(tmp_path / "single", health=health, max_steps=24)
    run_train(single, progress=False)
    run = make_run(tmp_path / mode, distributed=mode, health=health, max_steps=24)
    cli_train(run)
    got, ref = dist_events(run, "train_step"), dist_events(single, "train_step")
    assert len(got) == len(ref) == 24
    tol = 1e-12 if mode == "ddp" else FSDP_RTOL  # DDP is the one-process arithmetic; FSDP reorders sums
    for a, b in zip(got, ref):
        assert a["bucket_loss"].keys() == b["bucket_loss"].keys()
        assert all(a["bucket_loss"][k] == pytest.approx(b["bucket_loss"][k], rel=tol) for k in b["bucket_loss"])
        assert ("act_rms" in a) == ("act_rms" in b) == (a["step"] % 4 == 0)
        if "act_rms" in a:
            assert a["act_rms"] == pytest.approx(b["act_rms"], rel=max(tol, 1e-6))
            assert a["attn_logit_max"] == pytest.approx(b["attn_logit_max"], rel=max(tol, 1e-6))
    if mode == "ddp":  # bit-identical norms: the same warnings (FSDP's could differ at the threshold)
        assert dist_events(run, "grad_drift") and \
            [(e["step"], e["group"]) for e in dist_events(run, "grad_drift")] == \
            [(e["step"], e["group"]) for e in dist_events(single, "grad_drift")]
