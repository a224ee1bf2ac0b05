import json
import math

import torch

from tokenmill.eval.evaluate import Evaluator, write_eval
from tokenmill.eval.unigram import unigram_logprobs
from tokenmill.tokens.store import TokenStore

from tests.conftest import ContextFreeModel


def test_a_model_equal_to_the_unigram_scores_the_unigram_bpb(tokenized_run):
    store = TokenStore(tokenized_run.sub("tokens"))
    ev = Evaluator(store, seq_len=64, max_docs=None, batch_size=8)
    for bucket in ("code", "prose"):
        model = ContextFreeModel(unigram_logprobs(store, bucket))
        m = ev.score(model, torch.device("cpu"))[bucket]
        assert math.isclose(m["bpb"], m["unigram_bpb"], rel_tol=1e-4)
        val = store.meta["buckets"][bucket]["val"]
        assert m["docs"] == val["docs"] and m["bytes"] == val["bytes"]
        assert m["tokens"] == val["tokens"] - val["docs"]  # closing EOS not scored
        assert math.isclose(m["ppl"], math.exp(m["loss"]), rel_tol=1e-9)


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
