import math

import pytest
import torch

from tokenmill.config import FaultConfig
from tokenmill.mixture.packing import Batch
from tokenmill.train.faults import any_faults, corrupt_batch, lr_factor, poison_loss


def _batch() -> Batch:
    return Batch(tokens=torch.arange(2 * 9).view(2, 9) % 7, positions=None, segments=None,
                 loss_mask=torch.ones(2, 8, dtype=torch.bool))


def test_no_faults_by_default():
    cfg = FaultConfig()
    assert not any_faults(cfg)
    b = _batch()
    assert corrupt_batch(b, 3, 0, cfg, 64, 1) is b
    assert poison_loss(torch.tensor(2.0), 3, cfg).item() == 2.0 and lr_factor(3, cfg) == 1.0


def test_corrupt_batch_is_random_but_a_pure_function_of_the_step():
    cfg = FaultConfig(corrupt_steps=[3])
    b = _batch()
    c1, c2 = corrupt_batch(b, 3, 0, cfg, 64, 1), corrupt_batch(b, 3, 0, cfg, 64, 1)
    assert torch.equal(c1.tokens, c2.tokens) and not torch.equal(c1.tokens, b.tokens)
    assert c1.tokens.shape == b.tokens.shape and int(c1.tokens.max()) < 64
    assert not torch.equal(corrupt_batch(b, 3, 1, cfg, 64, 1).tokens, c1.tokens)  # each micro differs
    assert torch.equal(c1.loss_mask, b.loss_mask)


def test_nan_and_lr_window():
    cfg = FaultConfig(nan_steps=[5], lr_blowup=[10, 12], lr_blowup_factor=50.0)
    assert any_faults(cfg)
    assert math.isnan(poison_loss(torch.tensor(1.0), 5, cfg).item())
    assert [lr_factor(s, cfg) for s in (9, 10, 11, 12, 13)] == [1.0, 50.0, 50.0, 50.0, 1.0]


# --------------------------------------------------------------------------- process faults
@pytest.mark.slow
def test_a_process_fault_fires_once_per_run(tmp_path):
    """faults.kill in a real child process: SIGKILLed at its step the first time, not the second
    (the marker under <run>/faults/ is written before the kill)."""
    import signal
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path; from tokenmill.config import FaultConfig; "
            "from tokenmill.train.faults import process_fault; "
            f"[process_fault(s, 1, FaultConfig(kill=[3, 1]), Path({str(tmp_path)!r})) for s in range(1, 6)]; "
            "print('survived')")
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert first.returncode == -signal.SIGKILL and "survived" not in first.stdout
    assert (tmp_path / "faults" / "kill-step3-rank1").exists()
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert again.returncode == 0 and "survived" in again.stdout
    other_rank = FaultConfig(kill=[3, 0], hang=[4, 0])
    from tokenmill.train.faults import process_fault

    for step in range(1, 6):
        process_fault(step, 1, other_rank, tmp_path)  # rank 1 is not the faulted rank: nothing happens


def test_a_slow_rank_reads_slower_and_only_that_rank(monkeypatch):
    import time

    from tokenmill.train.faults import slow_read

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    slow_read(0, FaultConfig(slow=[1, 0.25]))
    slow_read(1, FaultConfig(slow=[1, 0.25]))
    assert slept == [0.25]


@pytest.mark.slow
def test_a_rank_killed_mid_run_is_restarted_by_torchrun_and_ends_with_the_undisturbed_losses(single, tmp_path):
    """`tokenmill train --nproc 2 --restarts 1`: rank 1 is SIGKILLed as step 6 starts; torchrun
    restarts the group, which resumes from the step-4 checkpoint; every logged loss, the replayed
    step 5 included, is the undisturbed (one-process) run's, bit for bit."""
    import subprocess
    import sys

    from tests.train.dist_helpers import REPO, env, events, make_run, series

    run = make_run(tmp_path / "run", distributed="ddp", preempt_grace_s=5, faults={"kill": [6, 1]})
    out = subprocess.run([sys.executable, "-m", "tokenmill", "train", str(run.path / "config.yaml"), "--run-dir",
                          str(run.path), "--nproc", "2", "--restarts", "1"], env=env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stdout[-8000:]
    (restart,) = events(run, "restart")
    assert restart["by"] == "torchrun" and restart["attempt"] == 1 and restart["resume_step"] == 4
    assert events(run, "resumed")[0]["step"] == 4
    assert len(events(run, "train_step")) > 12  # step 5 ran twice
    assert series(run) == series(single) and series(run, "grad_norm") == series(single, "grad_norm")


def test_poisoning_a_bucket_replaces_only_its_rows_inside_the_window():
    from tokenmill.train.faults import poison_rows

    cfg = FaultConfig(poison_bucket="web", poison_steps=[5, 7])
    b = _batch()
    assert poison_rows(b, ["code", "web"], 4, 0, cfg, 64, 1) is b  # before the window
    assert poison_rows(b, ["code", "code"], 5, 0, cfg, 64, 1) is b  # no row of the bucket
    p = poison_rows(b, ["code", "web"], 6, 0, cfg, 64, 1)
    assert torch.equal(p.tokens[0], b.tokens[0]) and not torch.equal(p.tokens[1], b.tokens[1])
    assert torch.equal(p.tokens, poison_rows(b, ["code", "web"], 6, 0, cfg, 64, 1).tokens)  # a pure function


def test_collapsing_the_embedding_pulls_rows_to_their_mean_and_raises_the_sv_ratio():
    from tokenmill.train.faults import collapse_embedding, collapsing_embedding
    from tokenmill.train.metrics import embedding_spectrum

    w = torch.randn(64, 16, generator=torch.Generator().manual_seed(0)) + 0.3
    mean, before = w.mean(0), embedding_spectrum(w)["sv_ratio"]
    cfg = FaultConfig(collapse_embedding=[3, 40], collapse_rate=0.9)
    assert not collapsing_embedding(2, cfg) and collapsing_embedding(3, cfg) and not collapsing_embedding(41, cfg)
    for _ in range(38):
        collapse_embedding(w, cfg.collapse_rate)
    assert torch.allclose(w.mean(0), mean, atol=1e-5)  # the mean row stays; the rows crowd onto it
    assert embedding_spectrum(w)["sv_ratio"] > 10 > before
