import numpy as np

from tokenmill.mixture.loader import Loader
from tokenmill.runs import read_events
from tokenmill.tokens.store import TokenStore
from tokenmill.train.replay import batch_documents, replay_loss
from tokenmill.train.trainer import run_train


def _logged(run, step):
    return [e["loss"] for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step" and e["step"] == step][-1]


def test_replay_recomputes_the_logged_loss_bitwise(tiny_run):
    run_train(tiny_run, progress=False)  # 30 steps, checkpoints kept at 20 and 30
    r = replay_loss(tiny_run, 25)
    assert r["from_checkpoint"].endswith("step_20") and r["rolled_forward_steps"] == 4
    assert r["loss"] == _logged(tiny_run, 25) and r["matches_log"] is True
    r21 = replay_loss(tiny_run, 21)
    assert r21["rolled_forward_steps"] == 0 and r21["loss"] == _logged(tiny_run, 21)


def test_replay_lists_the_documents_really_in_the_batch(tiny_run):
    cfg, tc = tiny_run.config, tiny_run.config.train
    store = TokenStore(tiny_run.path / "tokens")
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.seed)
    docs = batch_documents(tiny_run, 7)
    shards = {f"{s.prefix.parent.name}/{s.prefix.name}": s for b in store.buckets for sp in ("train",)
              for s in store.shards(b, sp)}
    rows = {(m, r): loader.batch(7, m).tokens[r].numpy() for m in range(tc.grad_accum) for r in range(tc.micro_batch)}
    covered = {}
    for d in docs:
        row = rows[(d["micro"], d["row"])]
        span = shards[d["shard"]].doc(d["doc"])[d["token_start"]:d["token_end"]]
        got = row[d["row_start"]: d["row_start"] + len(span)]
        assert np.array_equal(span, got)  # the listed tokens are the batch's tokens
        covered[(d["micro"], d["row"])] = covered.get((d["micro"], d["row"]), 0) + len(span)
    assert covered == {k: tc.seq_len + 1 for k in rows}  # every token of every row is accounted for
    assert {d["bucket"] for d in docs} <= {"a", "b"} and all(d["doc_id"] for d in docs)
