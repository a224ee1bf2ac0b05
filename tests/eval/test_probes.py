import json
import math

import numpy as np
import pytest
import torch

from tokenmill.config import ProbeConfig
from tokenmill.eval.perplexity import bpb_interval
from tokenmill.eval.probes import ProbeError, load_probes, probe_texts, score_probes
from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokens.store import TokenStore

from tests.conftest import ContextFreeModel


def test_probe_files_jsonl_and_blank_line_text(tmp_path):
    j = tmp_path / "p.jsonl"
    j.write_text(json.dumps({"text": "def f(x):\n    return x"}) + "\n\n" + json.dumps({"text": "print(1)"}) + "\n")
    assert probe_texts(j) == ["def f(x):\n    return x", "print(1)"]
    t = tmp_path / "p.txt"
    t.write_text("first probe\nstill first\n\n\nsecond probe\n")
    assert probe_texts(t) == ["first probe\nstill first", "second probe"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"txt": "x"}) + "\n")
    with pytest.raises(ProbeError, match="bad.jsonl:1"):
        probe_texts(bad)
    with pytest.raises(ProbeError, match="not found"):
        probe_texts(tmp_path / "missing.txt")


def test_a_context_free_model_scores_the_independent_unigram_sum(tokenized_run, tmp_path):
    store = TokenStore(tokenized_run.sub("tokens"))
    tok = load_tokenizer(tokenized_run.sub("tokenizer", "tokenizer.json"))
    texts = ["import os\nprint(os.getcwd())", "The quick brown fox jumps over the lazy dog. " * 20]
    path = tmp_path / "probes.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    logp = torch.log_softmax(torch.randn(store.vocab_size, generator=torch.Generator().manual_seed(0)), -1)
    probes = load_probes([ProbeConfig(name="mix", path=str(path))], tok, store.eos_id, seq_len=16)
    got = score_probes(ContextFreeModel(logp), probes, torch.device("cpu"), 4, store.pad_id)["mix"]
    ids = [np.asarray(tok.encode(t).ids) for t in texts]
    nll = -sum(float(logp[i].double().sum()) for i in ids)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    assert got["docs"] == 2 and got["tokens"] == sum(len(i) for i in ids) and got["bytes"] == n_bytes
    assert math.isclose(got["bpb"], nll / (math.log(2) * n_bytes), rel_tol=1e-5)
    # the interval is over the set's probes, each scored apart
    per_probe = np.array([-float(logp[i].double().sum()) for i in ids])
    low, high = bpb_interval(per_probe, np.array([len(t.encode("utf-8")) for t in texts]))
    assert math.isclose(got["bpb_ci_low"], low, rel_tol=1e-4) and math.isclose(got["bpb_ci_high"], high, rel_tol=1e-4)


def test_packaged_probe_sets_of_the_demo_load():
    """The demo's probe sets ship inside the package ('package:probes/...') and each holds several probes."""
    from tokenmill.cli import demo_config_path
    from tokenmill.config import load_config
    from tokenmill.eval.tasks import task_path

    probes = load_config(demo_config_path()).eval.probes
    assert [p.name for p in probes] == ["python-idioms", "docs-prose"]
    for p in probes:
        assert len(probe_texts(task_path(p.path))) >= 6
