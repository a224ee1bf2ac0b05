"""Canary exposure: the math against an independent computation, limiting cases, and a real
training run where a canary seen many times is more exposed than one seen once."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import norm

from tokenmill.config import CanaryConfig, ModelConfig, RunConfig
from tokenmill.data.canaries import canary_text, canaries_record, load_canaries, make_canaries
from tokenmill.eval.canaries import by_count, canary_exposure, candidate_secrets, empirical_fraction
from tokenmill.model.transformer import Transformer
from tests.conftest import ContextFreeModel

EOS, PAD = 0, 1
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 "
VOCAB = 2 + len(CHARS)
DIGITS, M = 5, 300
CPU = torch.device("cpu")


class CharTokenizer:
    """One token per character (the `tokenizers` encode interface): every candidate secret has
    the same number of tokens, so position-wise models score them comparably."""

    def encode(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        return SimpleNamespace(ids=[2 + CHARS.index(ch) for ch in text])


class PositionModel(torch.nn.Module):
    """Logits that depend only on the position: table[t] predicts the token at t + 1."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table.float())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table[: idx.shape[1]].expand(idx.shape[0], -1, -1)


def record(seed: int = 3, counts: tuple[int, ...] = (1, 4), per_count: int = 2, candidates: int = M) -> dict:
    cfg = CanaryConfig(counts=list(counts), per_count=per_count, secret_digits=DIGITS, candidates=candidates)
    rec = canaries_record(cfg, make_canaries(cfg, seed, "web"))
    rec["canaries"] = make_canaries(cfg, seed, "web")
    return rec


def ids_of(text: str) -> list[int]:
    return [EOS, *CharTokenizer().encode(text).ids]


def independent_px(table: np.ndarray, text: str) -> float:
    """-log2 Pr(text | EOS) under a position model, in numpy float64."""
    seq = ids_of(text)
    logp = table - np.log(np.exp(table).sum(axis=1, keepdims=True))
    return -sum(logp[t, seq[t + 1]] for t in range(len(seq) - 1)) / math.log(2)


def exposure(model, rec, batch_size=16):
    return canary_exposure(model, CharTokenizer(), rec, CPU, batch_size, seed=9, eos_id=EOS, pad_id=PAD)


def test_matches_an_independent_computation():
    rec = record()
    table = np.random.default_rng(0).normal(0, 2, size=(64, VOCAB))
    out = exposure(PositionModel(torch.tensor(table)), rec)
    secrets = candidate_secrets(9, M, DIGITS, {c.secret for c in rec["canaries"]})
    ref = np.array([independent_px(table, canary_text(rec["template"], s)) for s in secrets])
    assert out["candidates"] == M and out["max_exposure"] == pytest.approx(DIGITS * math.log2(10))
    for c, row in zip(rec["canaries"], out["canaries"]):
        px = independent_px(table, c.text)
        less, equal = int((ref < px - 1e-6).sum()), int((abs(ref - px) <= 1e-6).sum())
        q = (less + equal / 2 + 1) / (M + 1)
        assert row["log_ppl"] == pytest.approx(px, rel=1e-5)
        assert row["exposure_empirical"] == pytest.approx(-math.log2(q))
        assert row["rank_estimate"] == pytest.approx(q * 10 ** DIGITS)
        want = -norm.logcdf(px, ref.mean(), ref.std(ddof=1)) / math.log(2)
        assert row["exposure_extrapolated"] == pytest.approx(min(want, DIGITS * math.log2(10)), rel=1e-4)
    assert out["by_count"]["4"]["mean_exposure_empirical"] == pytest.approx(
        np.mean([r["exposure_empirical"] for r in out["canaries"] if r["count"] == 4]))


def test_a_canary_the_model_predicts_exactly_has_maximal_exposure():
    rec = record(counts=(1,), per_count=1)
    seq = ids_of(rec["canaries"][0].text)
    table = torch.zeros(64, VOCAB)
    for t in range(len(seq) - 1):
        table[t, seq[t + 1]] = 8.0  # the canary's next character is the most likely one everywhere
    row = exposure(PositionModel(table), rec)["canaries"][0]
    assert row["exposure_empirical"] == pytest.approx(math.log2(M + 1))  # ranked first of M + 1
    assert row["rank_estimate"] == pytest.approx(10 ** DIGITS / (M + 1))
    # Each secret digit the candidate gets wrong costs ~8 nats: the canary lies far below them all.
    assert row["exposure_extrapolated"] > row["exposure_empirical"]
    assert row["exposure_extrapolated"] <= DIGITS * math.log2(10)


def test_a_uniform_model_gives_about_one_bit():
    rec = record()
    out = exposure(ContextFreeModel(torch.zeros(VOCAB)), rec)
    for row in out["canaries"]:  # every secret equally likely: the mid-rank is half of R
        assert row["exposure_empirical"] == pytest.approx(-math.log2((M / 2 + 1) / (M + 1)))
        assert row["exposure_empirical"] < 1.0
        assert row["rank_estimate"] == pytest.approx(10 ** DIGITS / 2, rel=0.01)
        assert row["exposure_extrapolated"] == 1.0


def test_batch_size_does_not_change_the_result():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                    max_seq_len=64), generator=torch.Generator().manual_seed(1))
    rec = record(candidates=40)
    one, many = exposure(model, rec, batch_size=1), exposure(model, rec, batch_size=13)
    for a, b in zip(one["canaries"], many["canaries"]):
        assert a["log_ppl"] == pytest.approx(b["log_ppl"], rel=1e-5)
        assert a["exposure_empirical"] == b["exposure_empirical"]
    assert exposure(model, rec, batch_size=13) == many  # deterministic


def test_empirical_fraction_counts_ties_half():
    assert empirical_fraction(1.0, np.array([0.5, 1.0, 1.0, 2.0])) == (1 + 1 + 1) / 5
    assert by_count([{"count": 2, "exposure_empirical": 1.0, "exposure_extrapolated": 3.0, "log_ppl": 5.0},
                     {"count": 2, "exposure_empirical": 2.0, "exposure_extrapolated": 4.0, "log_ppl": 7.0}]) == {
        "2": {"canaries": 2, "mean_exposure_empirical": 1.5, "mean_exposure_extrapolated": 3.5, "mean_log_ppl": 6.0}}


# --------------------------------------------------------------------------- end to end
def e2e_run(root: Path):
    """Curate (with canaries inserted 1, 8 and 48 times), train a tiny model, evaluate."""
    import pydoc_data.topics as t

    from tokenmill.runs import RunDir

    texts = [t.topics[k][:800] for k in sorted(t.topics) if len(t.topics[k]) > 800][:30]
    src = root / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": x}) + "\n" for x in texts))
    cfg = RunConfig.model_validate({
        "name": "e2e", "root": str(root), "seed": 4,
        # the kind declared, as before kinds were detected: hard-wrapped pydoc text stays as written
        "curate": {"sources": [{"path": str(src), "bucket": "prose"}], "steps": ["normalize"], "workers": 1,
                   "quality": {"kinds": {"prose": "prose"}},
                   "canaries": {"counts": [1, 8, 48], "per_count": 2, "secret_digits": 6, "candidates": 200}},
        "tokenizer": {"vocab_size": 300}, "tokenize": {"val_fraction": 0.0, "min_val_docs": 0},
        "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64},
        "train": {"seq_len": 64, "micro_batch": 16, "grad_accum": 1, "max_steps": 150, "lr": 0.01,
                  "warmup_steps": 10, "ckpt_every": 150, "keep_checkpoints": 1, "device": "cpu",
                  "threads": 1, "log_every": 50, "eval_every": 0},
        "eval": {"max_docs": 4, "num_samples": 0, "memorization_docs": 0, "batch_size": 32},
    })
    return RunDir.create(cfg, root / "run")


@pytest.mark.slow
def test_repeated_canaries_are_more_exposed_after_training(tmp_path):
    from tokenmill.data.curate import run_curate
    from tokenmill.eval.evaluate import run_eval
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize
    from tokenmill.train.trainer import run_train

    run = e2e_run(tmp_path)
    run_curate(run, progress=False)
    run_tokenizer(run)
    run_tokenize(run)
    run_train(run, progress=False)
    summary = run_eval(run)
    out = json.loads(run.sub("eval", f"{summary['step']}.json").read_text())["canaries"]
    # Measured (seed 4, CPU): mean exposure 1.8 / 3.9 / 7.65 bits empirical (7.65 = log2 201, the
    # cap: both 48x canaries rank first), 1.9 / 3.8 / 9.2 bits extrapolated, of 19.9 possible.
    # This tiny run at lr 0.01 is chaotic: the fused q/k/v model matches the separate one bit for
    # bit over the first 8 steps and by 1e-7 in the gradient norms, yet ends 0.2 nats apart at
    # step 150 (measured in fp32 and bf16). There one 48x canary ranks second (7.15 bits) and the
    # extrapolated exposures read 2.2 / 2.6 / 3.5. So the test asserts the ordering, the top two
    # and a margin, not one trajectory's figures.
    groups = [out["by_count"][k] for k in ("1", "8", "48")]
    for key in ("mean_exposure_empirical", "mean_exposure_extrapolated"):
        assert groups[0][key] < groups[1][key] < groups[2][key]
    assert groups[2]["mean_exposure_empirical"] >= math.log2(201 / 2) - 1e-9  # both in the top 2 of 201
    assert groups[2]["mean_exposure_extrapolated"] > groups[0]["mean_exposure_extrapolated"] + 1
    assert [c.secret for c in load_canaries(run.sub("curated"))["canaries"]] == [r["secret"] for r in out["canaries"]]
