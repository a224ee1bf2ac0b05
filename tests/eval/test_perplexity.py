import math

import numpy as np
import torch

from tokenmill.eval.perplexity import Score, doc_targets, doc_windows, windows_nll

from tests.conftest import ContextFreeModel


def test_windows_cover_every_target_once():
    doc = np.array([11, 12, 13, 14, 15, 16, 17, 0])  # stored document, closing EOS last
    for seq_len in (1, 2, 3, 7, 8, 50):
        windows = doc_windows(doc, seq_len, eos_id=0)
        assert windows[0][0] == 0  # context starts at EOS
        assert all(len(w) <= seq_len + 1 for w in windows)
        targets = np.concatenate([w[1:] for w in windows])
        assert targets.tolist() == doc_targets(doc).tolist() == [11, 12, 13, 14, 15, 16, 17]
        for a, b in zip(windows, windows[1:]):
            assert a[-1] == b[0]  # consecutive windows overlap by one token


def test_windows_nll_equals_independent_sum_and_ignores_padding():
    logp = torch.log_softmax(torch.randn(20, generator=torch.Generator().manual_seed(0)), -1)
    model = ContextFreeModel(logp)
    windows = [np.array([0, 3, 4, 5]), np.array([5, 6]), np.array([0, 9, 9, 9, 9, 9, 1])]
    expected = -sum(float(logp[t]) for w in windows for t in w[1:])
    for bs in (1, 2, 3):
        got = windows_nll(model, windows, bs, torch.device("cpu"), pad_id=2)
        assert math.isclose(got, expected, rel_tol=1e-5)


def test_score_metrics():
    s = Score(nll=10 * math.log(2), tokens=5, bytes=20, docs=1)
    m = s.metrics()
    assert math.isclose(m["bpb"], 0.5) and math.isclose(m["loss"], 2 * math.log(2))
    assert math.isclose(m["ppl"], 4.0)
