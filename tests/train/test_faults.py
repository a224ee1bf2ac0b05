import math

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
