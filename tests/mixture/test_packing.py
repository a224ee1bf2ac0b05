import numpy as np
import pytest
import torch

from tokenmill.mixture.packing import Batch, RowMasks, packed_masks, padded_row


def loop_masks(run_lengths: list[int], T: int):
    """Independent per-token loop: doc of each of the T+1 tokens, then the three arrays."""
    doc = [d for d, n in enumerate(run_lengths) for _ in range(n)]
    pos, seg, mask, p = [], [], [], 0
    for t in range(T):
        p = 0 if t == 0 or doc[t] != doc[t - 1] else p + 1
        pos.append(p)
        seg.append(doc[t])
        mask.append(doc[t] == doc[t + 1])
    return pos, seg, mask


@pytest.mark.parametrize("runs", [[9], [1, 8], [4, 1, 1, 3], [8, 1], [3, 3, 3]])
def test_packed_masks_match_a_per_token_loop(runs):
    T = sum(runs) - 1
    m = RowMasks.empty(1, T)
    packed_masks(runs, T, True, m.positions[0], m.segments[0], m.loss_mask[0])
    pos, seg, mask = loop_masks(runs, T)
    assert m.positions[0].tolist() == pos and m.segments[0].tolist() == seg and m.loss_mask[0].tolist() == mask
    assert (~m.loss_mask[0]).sum() == len(runs) - 1  # one lost target per document boundary
    packed_masks(runs, T, False, m.positions[0], m.segments[0], m.loss_mask[0])
    assert m.loss_mask[0].all()


def test_padded_row_cuts_pads_and_masks():
    T, pad = 6, 2
    m = RowMasks.empty(1, T)
    assert padded_row(np.array([5, 6, 7, 0]), T, pad, m.tokens[0], m.positions[0], m.segments[0], m.loss_mask[0]) == 4
    assert m.tokens[0].tolist() == [5, 6, 7, 0, 2, 2, 2]
    assert m.loss_mask[0].tolist() == [True, True, True, False, False, False]
    assert m.segments[0].tolist() == [0, 0, 0, 0, 1, 1] and m.positions[0].tolist() == [0, 1, 2, 3, 0, 1]
    assert padded_row(np.arange(10, 30), T, pad, m.tokens[0], m.positions[0], m.segments[0], m.loss_mask[0]) == 7
    assert m.tokens[0].tolist() == list(range(10, 17)) and m.loss_mask[0].all() and (m.segments[0] == 0).all()


def test_batch_r_pad_and_device_moves():
    mask = torch.tensor([[True, False, True, True], [False, False, True, True]])
    b = Batch(tokens=torch.zeros(2, 5, dtype=torch.long), positions=None, segments=None, loss_mask=mask)
    assert b.n_targets == 5 and b.r_pad == pytest.approx(3 / 8)
    moved = b.to("cpu")
    assert moved.positions is None and torch.equal(moved.loss_mask, mask)
