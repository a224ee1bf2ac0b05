import json
import math

import numpy as np
import pytest
import torch

from tokenmill.eval.evaluate import Evaluator, write_eval
from tokenmill.eval.perplexity import bpb_interval, doc_targets
from tokenmill.eval.unigram import unigram_logprobs, unigram_nll
from tokenmill.tokens.store import TokenStore

from tests.conftest import ContextFreeModel


def test_a_model_equal_to_the_unigram_scores_the_unigram_bpb(tokenized_run):
    store = TokenStore(tokenized_run.sub("tokens"))
    ev = Evaluator(store, seq_len=64, max_docs=None, batch_size=8)
    checked = 0
    for bucket in ("code", "prose"):
        model = ContextFreeModel(unigram_logprobs(store, bucket))
        m = ev.score(model, torch.device("cpu"))[bucket]
        assert math.isclose(m["bpb"], m["unigram_bpb"], rel_tol=1e-4)
        val = store.meta["buckets"][bucket]["val"]
        assert m["docs"] == val["docs"] and m["bytes"] == val["bytes"]
        assert m["tokens"] == val["tokens"] - val["docs"]  # closing EOS not scored
        assert math.isclose(m["ppl"], math.exp(m["loss"]), rel_tol=1e-9)
        # the interval is over documents: each document's own unigram NLL, computed apart
        logp = unigram_logprobs(store, bucket)
        docs = store.docs(bucket, "val")
        per_doc = np.array([unigram_nll(logp, doc_targets(shard.doc(i))) for shard, i in docs])
        n_bytes = np.array([shard.doc_table().column("n_bytes")[i].as_py() for shard, i in docs])
        ci = bpb_interval(per_doc, n_bytes)
        if ci is None:  # a single held-out document: no spread to measure
            assert len(docs) == 1 and m["bpb_ci_low"] is None and m["bpb_ci_high"] is None
            continue
        assert math.isclose(m["bpb_ci_low"], ci[0], rel_tol=1e-4) and math.isclose(m["bpb_ci_high"], ci[1], rel_tol=1e-4)
        assert m["bpb_ci_low"] < m["bpb"] < m["bpb_ci_high"] and m["bpb_ci_level"] == 0.95
        checked += 1
    assert checked  # at least one bucket has an interval to compare


def test_uniform_model_scores_log2_vocab_bits_per_token(tokenized_run):
    store = TokenStore(tokenized_run.sub("tokens"))
    ev = Evaluator(store, seq_len=32, max_docs=3, batch_size=4)
    m = ev.score(ContextFreeModel(torch.zeros(store.vocab_size)), torch.device("cpu"))["prose"]
    assert m["docs"] == min(3, store.meta["buckets"]["prose"]["val"]["docs"])
    assert math.isclose(m["bpb"] * m["bytes"] / m["tokens"], math.log2(store.vocab_size), rel_tol=1e-5)


def test_write_eval_file_and_event(tokenized_run):
    rec = write_eval(tokenized_run, 7, {"prose": {"loss": 1.0, "bpb": 0.5}}, samples=[])
    on_disk = json.loads(tokenized_run.sub("eval", "7.json").read_text())
    assert on_disk == rec and on_disk["step"] == 7
    ev = [e for e in tokenized_run.events.read() if e["kind"] == "eval"][-1]
    assert ev["step"] == 7 and ev["buckets"]["prose"]["bpb"] == 0.5 and ev["stage"] == "eval"


def test_run_eval_scores_tasks_with_contamination_and_memorization(tokenized_run):
    from pathlib import Path

    from tokenmill.config import ModelConfig, RunConfig
    from tokenmill.eval.contamination import contamination, task_eval_sets
    from tokenmill.eval.evaluate import run_eval
    from tokenmill.eval.tasks import score_task
    from tokenmill.model.transformer import Transformer
    from tokenmill.runs import RunDir
    from tokenmill.tokenizer.bpe import load_tokenizer
    from tokenmill.train.checkpoint import save_checkpoint

    fixtures = Path(__file__).parent / "fixtures"
    data = tokenized_run.config.model_dump()
    data["train"].update(seq_len=64, device="cpu", dtype="float32")
    data["eval"].update(max_docs=2, num_samples=0, memorization_docs=2, memorization_prefix=8, memorization_suffix=4,
                        tasks=[{"name": "arc-mini", "path": str(fixtures / "arc.jsonl"), "format": "arc", "shots": 1},
                               {"name": "lambada-mini", "path": str(fixtures / "lambada.jsonl"), "format": "lambada"}])
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    store = TokenStore(run.sub("tokens"))
    mcfg = ModelConfig(vocab_size=store.vocab_size, d_model=32, n_layers=1, n_heads=4, max_seq_len=64)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(0))
    save_checkpoint(run.sub("checkpoints"), 5, model, None, {"model_config": mcfg.model_dump(mode="json")})

    summary = run_eval(run)
    record = json.loads(run.sub("eval", "5.json").read_text())
    tasks = {t["name"]: t for t in record["tasks"]}
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    model.eval()
    for cfg in run.config.eval.tasks:  # the same scores as scoring the task directly
        direct = score_task(model, tok, cfg, torch.device("cpu"), 3, 64, eos_id=store.eos_id, pad_id=store.pad_id)
        assert tasks[cfg.name]["acc"] == direct["acc"] and tasks[cfg.name]["n"] == direct["n"]
        # eval/<step>.json keeps every item's scores, for comparing with lm-eval item by item
        stored, fresh = tasks[cfg.name]["items"], direct["items"]
        assert [r["line"] for r in stored] == [r["line"] for r in fresh] == list(range(1, direct["n"] + 1))
        flat = [[*r["logprobs"]] if "logprobs" in r else [r["logprob"]] for r in (*stored, *fresh)]
        assert sum(flat[: len(stored)], []) == pytest.approx(sum(flat[len(stored) :], []), abs=1e-5)
    assert summary["tasks"] == {n: round(t["acc"], 4) for n, t in tasks.items()}
    expected = contamination(store, task_eval_sets(run.config.eval.tasks, tok), n=13)
    for name, c in record["contamination"].items():
        assert (c["ngrams"], c["found"]) == (expected[name]["ngrams"], expected[name]["found"])
        assert c["flagged"] == (c["share"] > run.config.eval.contamination_threshold)
    mem = record["memorization"]
    assert mem["settings"] == {"prefix": 8, "suffix": 4}
    assert {"train", "heldout"} <= set(mem["overall"]) and mem["overall"]["train"]["n"] >= 1


def test_in_training_evaluations_score_the_probes_on_the_timeline(tokenized_run, tmp_path):
    from tokenmill.config import ModelConfig, RunConfig
    from tokenmill.eval.evaluate import in_training_evaluator
    from tokenmill.model.transformer import Transformer
    from tokenmill.report.eval_section import section_eval
    from tokenmill.runs import RunDir

    probe = tmp_path / "code_probe.txt"
    probe.write_text("def add(a, b):\n    return a + b\n\nfor i in range(3):\n    print(i)\n")
    data = tokenized_run.config.model_dump()
    data["train"].update(seq_len=32, dtype="float32", eval_docs=2)
    data["eval"]["probes"] = [{"name": "code-snippets", "path": str(probe)}]
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    store = TokenStore(run.sub("tokens"))
    model = Transformer(ModelConfig(vocab_size=store.vocab_size, d_model=32, n_layers=1, n_heads=4, max_seq_len=32),
                        generator=torch.Generator().manual_seed(0))
    on_eval = in_training_evaluator(run)
    on_eval(10, model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    on_eval(20, model)
    records = [json.loads(run.sub("eval", f"{s}.json").read_text()) for s in (10, 20)]
    scores = [r["probes"]["code-snippets"] for r in records]
    assert all(s["docs"] == 2 for s in scores) and scores[0]["bpb"] != scores[1]["bpb"]
    html_text = section_eval(records)
    assert "Probes" in html_text and "code-snippets" in html_text and "Probe bits-per-byte" in html_text


def test_in_training_evaluations_score_tasks_and_write_samples(tokenized_run):
    """Tasks (with contamination computed once) and generation samples at every in-training
    evaluation; the scores equal those of `tokenmill eval`'s audits on the same model."""
    from pathlib import Path

    from tokenmill.config import ModelConfig, RunConfig
    from tokenmill.eval.evaluate import audits, in_training_evaluator
    from tokenmill.model.transformer import Transformer
    from tokenmill.runs import RunDir

    fixtures = Path(__file__).parent / "fixtures"
    data = tokenized_run.config.model_dump()
    data["train"].update(seq_len=64, dtype="float32", eval_docs=1)
    data["eval"].update(num_samples=2, sample_tokens=4, memorization_docs=0,
                        tasks=[{"name": "arc-mini", "path": str(fixtures / "arc.jsonl"), "format": "arc", "shots": 1}])
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    store = TokenStore(run.sub("tokens"))
    model = Transformer(ModelConfig(vocab_size=store.vocab_size, d_model=32, n_layers=1, n_heads=4, max_seq_len=64),
                        generator=torch.Generator().manual_seed(0))
    on_eval = in_training_evaluator(run)
    on_eval(10, model)
    on_eval(20, model)
    records = [json.loads(run.sub("eval", f"{s}.json").read_text()) for s in (10, 20)]
    for r in records:
        assert [t["name"] for t in r["tasks"]] == ["arc-mini"] and "arc-mini" in r["contamination"]
        assert len(r["samples"]) == 2 and all(isinstance(s["completion"], str) for s in r["samples"])
    assert records[0]["tasks"] == records[1]["tasks"]  # same model, deterministic scoring
    direct = audits(run, model, store, torch.device("cpu"))
    assert direct["tasks"][0]["acc"] == records[0]["tasks"][0]["acc"]
    assert direct["contamination"] == records[0]["contamination"]

    data["eval"]["tasks_in_training"] = False
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    in_training_evaluator(run)(30, model)
    assert "tasks" not in json.loads(run.sub("eval", "30.json").read_text())


def test_run_eval_scores_the_long_context_when_asked(tokenized_run):
    from tokenmill.config import ModelConfig, RunConfig
    from tokenmill.eval.evaluate import run_eval
    from tokenmill.model.transformer import Transformer
    from tokenmill.runs import RunDir
    from tokenmill.train.checkpoint import save_checkpoint

    data = tokenized_run.config.model_dump()
    data["train"].update(seq_len=32, device="cpu", dtype="float32")
    data["eval"].update(max_docs=2, num_samples=0, memorization_docs=0,
                        long_context={"enabled": True, "position_buckets": 2, "max_docs": 3, "passkey_trials": 4})
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    store = TokenStore(run.sub("tokens"))
    mcfg = ModelConfig(vocab_size=store.vocab_size, d_model=32, n_layers=1, n_heads=4, max_seq_len=256,
                       rope_scaling="yarn", rope_scaling_factor=4.0)
    model = Transformer(mcfg, generator=torch.Generator().manual_seed(0))
    save_checkpoint(run.sub("checkpoints"), 5, model, None, {"model_config": mcfg.model_dump(mode="json")})

    summary = run_eval(run)
    lc = json.loads(run.sub("eval", "5.json").read_text())["long_context"]
    assert lc["trained_seq_len"] == 32 and lc["rope"]["rope_scaling"] == "yarn"
    pos = lc["positions"]
    assert pos["seq_len"] == 256 and 1 <= pos["docs"] <= 3
    assert [(b["from"], b["to"]) for b in pos["buckets"]] == [(0, 32), (32, 128), (128, 256)]  # 32: the trained edge
    assert all(b["tokens"] == pos["docs"] * (b["to"] - b["from"]) for b in pos["buckets"])
    assert lc["passkey"]["trials"] == 4 and sum(b["trials"] for b in lc["passkey"]["by_distance"]) == 4
    assert set(summary["bpb_by_position"]) == {"0-32", "32-128", "128-256"} and "passkey" in summary


def test_run_eval_scores_with_the_configs_thread_count(tokenized_run, monkeypatch):
    """`tokenmill eval` uses train.threads like training: torch's default (one thread per core)
    competes with the other jobs of a shared CPU."""
    from tokenmill.config import RunConfig
    from tokenmill.eval import evaluate
    from tokenmill.runs import RunDir

    before = torch.get_num_threads()
    threads = 1 if before != 1 else 2
    data = tokenized_run.config.model_dump()
    data["train"].update(threads=threads)
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    seen: list[int] = []

    def score(self, ckpt):
        seen.append(torch.get_num_threads())
        raise RuntimeError("stop after the thread count is seen")

    monkeypatch.setattr(evaluate.CheckpointScorer, "score", score)
    monkeypatch.setattr("tokenmill.train.checkpoint.latest_checkpoint", lambda root: root / "step_1")
    with pytest.raises(RuntimeError, match="thread count"):
        evaluate.run_eval(run)
    assert seen == [threads] and torch.get_num_threads() == before
