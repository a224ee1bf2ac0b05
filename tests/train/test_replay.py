import numpy as np

from tokenmill.mixture.loader import Loader
from tokenmill.runs import RunDir, read_events
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


def _variant(tiny_run, name, mixture=None, **train):
    from tokenmill.config import RunConfig
    from tokenmill.runs import RunDir

    data = tiny_run.config.model_dump(mode="json")
    data["name"] = name
    data["train"].update(train)
    if mixture:
        data["mixture"].update(mixture)
    run = RunDir.create(RunConfig.model_validate(data), tiny_run.path.parent / name)
    (run.path / "tokens").symlink_to(tiny_run.path / "tokens")
    return run


def test_replay_of_a_continued_run_starts_from_the_inherited_weights(tiny_run):
    """Before its first checkpoint, a run with train.init_from rolls forward from the source's
    weights (not its seed's init): the replayed loss is the logged one."""
    run_train(tiny_run, progress=False)
    child = _variant(tiny_run, "child", init_from=str(tiny_run.path / "checkpoints"), max_steps=12, seed=5)
    run_train(child, progress=False)
    r = replay_loss(child, 6)
    assert r["from_checkpoint"] is None and r["init_from"] == str(tiny_run.path / "checkpoints")
    assert r["loss"] == _logged(child, 6) and r["matches_log"] is True


def test_replay_across_a_context_extension_uses_each_phases_rope(tiny_run):
    phases = [{"name": "short", "fraction": 0.6},
              {"name": "long", "fraction": 0.4, "seq_len": 128,
               "rope": {"rope_scaling": "yarn", "rope_scaling_factor": 4.0}}]
    run = _variant(tiny_run, "ext", mixture={"phases": phases}, keep_checkpoints=3)
    run_train(run, progress=False)  # checkpoints 10 (short), 20 and 30 (long); long starts at step 19
    for step, ckpt in ((19, "step_10"), (25, "step_20")):
        r = replay_loss(run, step)
        assert r["from_checkpoint"].endswith(ckpt) and r["loss"] == _logged(run, step), step


def test_replay_inside_a_rewound_window_uses_the_fresh_draw(tmp_path):
    from tests.train.test_guard import FAULTS, REWIND, _run  # the guard's tiny faulted run

    run = _run(tmp_path, FAULTS, "rewound", REWIND)
    run = RunDir.create(run.config.model_copy(update={"train": run.config.train.model_copy(
        update={"keep_checkpoints": 100})}), run.path)  # the rollback target stays to replay from
    run_train(run, progress=False)
    (rb,) = [e for e in read_events(run.path / "events.jsonl") if e["kind"] == "rollback"]
    step = rb["to_step"] + 3  # taken twice: on draw 0 (discarded), then on draw 1 (kept)
    first, kept = [e["loss"] for e in read_events(run.path / "events.jsonl")
                   if e["kind"] == "train_step" and e["step"] == step]
    r = replay_loss(run, step)
    assert r["from_checkpoint"].endswith(f"step_{rb['to_step']}") and r["rolled_forward_steps"] == 2
    assert r["loss"] == kept != first and r["matches_log"] is True
