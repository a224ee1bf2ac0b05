"""The report's noise-scale section: the measured B_simple against the batch, or why it is missing."""

from __future__ import annotations

from tokenmill.report.noise_section import section_noise


def _events(measured: bool) -> list[dict]:
    start = {"stage": "train", "kind": "train_start", "tokens_per_step": 4096,
             "noise_scale": {"measured": measured, "why_not": None if measured else "it needs train.grad_accum >= 2"}}
    steps = [{"stage": "train", "kind": "train_step", "step": i, "tokens": 4096 * i, "loss": 3.0,
              **({"noise_g2": 2.0, "noise_trace": 2000.0 + 10 * i, "b_simple": 1000.0 + 5 * i} if measured else {})}
             for i in range(1, 41)]
    return [start, *steps]


def test_section_states_b_simple_and_the_batch_ratio():
    out = section_noise(_events(True))
    b = (2000 + 10 * sum(range(21, 41)) / 20) / 2.0  # ratio of means over the second half
    assert f"{b:,.0f} tokens" in out
    assert f"{4096 / b:.3g} × B_simple" in out
    assert "above the critical batch" in out and "<svg" in out


def test_section_says_why_there_is_no_measurement():
    out = section_noise(_events(False))
    assert "not measured: it needs train.grad_accum &gt;= 2" in out
    assert section_noise([]) == ""
