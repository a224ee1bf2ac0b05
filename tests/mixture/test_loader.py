import logging
import random

import numpy as np
import pytest
import torch

from tokenmill.config import MixtureConfig
from tokenmill.mixture.loader import Batch, Loader, MixtureError
from tokenmill.mixture.plan import effective_tokens
from tokenmill.tokens.store import TokenStore, TokenStoreError

from .conftest import EOS, PAD, VOCAB, write_store

CURRICULUM = MixtureConfig(weights={"x": 1.0, "y": 1.0}, phases=[
    {"name": "short", "fraction": 0.25, "seq_len": 8},
    {"name": "bulk", "fraction": 0.5},
    {"name": "anneal", "fraction": 0.25, "weights": {"y": 1.0}, "anneal": True}])


def make(store, mixture=None, *, seq_len=16, micro_batch=4, grad_accum=2, max_steps=20, seed=7, **kw) -> Loader:
    return Loader(store, mixture or MixtureConfig(), seq_len, micro_batch, grad_accum, max_steps, seed, **kw)


def same(a: Batch, b: Batch) -> bool:
    opt = [(x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
           for x, y in ((a.positions, b.positions), (a.segments, b.segments))]
    return torch.equal(a.tokens, b.tokens) and torch.equal(a.loss_mask, b.loss_mask) and all(opt)


def global_rows(loader: Loader, step: int) -> torch.Tensor:
    """The global batch of `step` gathered from every rank's micro-batches, rank-major then micro."""
    return torch.cat([loader.batch(step, m).tokens for m in range(loader.grad_accum)])


# --------------------------------------------------------------------------- determinism, ranks, resume
def test_batches_are_a_pure_function_of_seed_step_micro(crafted):
    a, b = make(crafted, CURRICULUM), make(crafted, CURRICULUM)
    x = a.batch(12, 1)
    assert x.tokens.shape == (4, 17) and x.tokens.dtype == torch.long
    assert x.positions.dtype == torch.long and x.segments.dtype == torch.int32 and x.loss_mask.dtype == torch.bool
    for s, m in [(20, 0), (1, 1), (12, 0)]:  # other batches first: no hidden cursor
        b.batch(s, m)
    assert same(b.batch(12, 1), x)
    assert not torch.equal(a.batch(12, 0).tokens, x.tokens) and not torch.equal(a.batch(13, 1).tokens, x.tokens)
    assert not torch.equal(make(crafted, CURRICULUM, seed=8).batch(12, 1).tokens, x.tokens)


@pytest.mark.parametrize("mixture", [CURRICULUM, MixtureConfig(packing="padded")])
def test_world_sizes_1_and_2_see_the_same_global_batch(crafted, mixture):
    one = make(crafted, mixture, grad_accum=4)
    ranks = [make(crafted, mixture, grad_accum=2, world_size=2, rank=r) for r in range(2)]
    for step in (1, 5, 6, 13, 20):
        together = global_rows(one, step)
        split = torch.cat([global_rows(r, step) for r in ranks])
        assert torch.equal(together, split)
        assert sum(one.batch(step, m).n_targets for m in range(4)) == one.n_targets(step) == ranks[1].n_targets(step)
        key = [(s.bucket, s.sample, s.spans) for s in one.global_provenance(step)]
        assert key == [(s.bucket, s.sample, s.spans) for s in ranks[0].global_provenance(step)]
    assert one.fingerprint() == ranks[0].fingerprint() == ranks[1].fingerprint()


def test_a_fresh_loader_at_a_random_step_continues_exactly(crafted):
    n = random.Random(0).randint(2, 19)
    first = make(crafted, CURRICULUM)
    first.start_prefetch(1)
    uninterrupted = [first.batch(s, m) for s in range(1, 21) for m in range(2)]
    first.close()
    resumed = make(crafted, CURRICULUM)
    resumed.start_prefetch(n)
    tail = [resumed.batch(s, m) for s in range(n, 21) for m in range(2)]
    resumed.close()
    assert len(tail) == len(uninterrupted[2 * (n - 1):])
    assert all(same(a, b) for a, b in zip(tail, uninterrupted[2 * (n - 1):]))


def test_prefetch_gives_the_same_batches_in_any_request_order(crafted):
    plain = make(crafted, CURRICULUM)
    with make(crafted, CURRICULUM) as pre:
        pre.start_prefetch(3)
        order = [(3, 0), (3, 1), (4, 0), (6, 1), (2, 0), (2, 1), (3, 0), (20, 1), (7, 0)]  # skips, rewinds, end
        for s, m in order:
            assert same(pre.batch(s, m), plain.batch(s, m))


# --------------------------------------------------------------------------- curriculum
def test_phases_switch_at_the_right_steps_and_buckets_continue(crafted):
    loader = make(crafted, CURRICULUM)
    tokens_per_step = 2 * 4 * 16
    seen = {}
    for step in range(1, 21):
        ph = loader.phase_at(step)
        want = "short" if step <= 5 else "bulk" if step <= 15 else "anneal"
        assert ph.name == want and ph.anneal == (want == "anneal")
        b = loader.batch(step, 0)
        assert b.phase == want and b.tokens.shape == ((8, 9) if want == "short" else (4, 17))
        assert b.tokens[:, 1:].numel() * 2 == tokens_per_step  # tokens per step never change
        for src in loader.global_provenance(step):
            seen.setdefault(src.bucket, []).append((ph.index, src.sample, src.spans))
    assert loader.phase_at(5).token_end == 5 * tokens_per_step == loader.token_budget // 4
    assert loader.phase_at(16).token_start == 15 * tokens_per_step == 3 * loader.token_budget // 4
    assert {s[0] for s in seen["y"]} == {0, 1, 2} and {s[0] for s in seen["x"]} == {0, 1}  # anneal: y only
    for bucket, samples in seen.items():  # each bucket's samples tile its stream, across phases too
        samples.sort(key=lambda s: (s[0], loader._shuffled(s[0], bucket, s[1])))  # in stream order
        for (_, _, a), (_, _, b) in zip(samples, samples[1:]):
            last, first = a[-1], b[0]
            assert (last.shard, last.doc, last.epoch, last.end - 1) == (first.shard, first.doc, first.epoch, first.start)


# --------------------------------------------------------------------------- packing and masks
def test_doc_masking_follows_the_eos_of_every_document(crafted):
    loader = make(crafted, CURRICULUM)
    lost = 0
    for step in (1, 7, 19):
        for m in range(2):
            b = loader.batch(step, m)
            inp = b.tokens[:, :-1]
            # EOS occurs only at document ends in this store: an input EOS is exactly a lost target
            assert torch.equal(b.loss_mask, inp != EOS)
            starts = torch.ones_like(inp, dtype=torch.bool)
            starts[:, 1:] = inp[:, :-1] == EOS
            assert torch.equal(b.positions == 0, starts)
            assert torch.equal(b.segments, (torch.cumsum(starts.int(), 1) - 1).int())
            assert torch.equal(b.positions[:, 1:][~starts[:, 1:]], b.positions[:, :-1][~starts[:, 1:]] + 1)
            assert b.r_pad == pytest.approx((inp == EOS).float().mean().item())
            lost += int((~b.loss_mask).sum())
    assert lost > 0  # docs are 1-70 tokens: boundaries happen


def test_without_doc_masking_every_target_counts(crafted):
    b = make(crafted, MixtureConfig(doc_masking=False)).batch(3, 1)
    assert b.positions is None and b.segments is None and b.loss_mask.all() and b.r_pad == 0.0
    assert torch.equal(b.tokens, make(crafted).batch(3, 1).tokens)  # masking never changes the tokens


@pytest.mark.parametrize("shuffle", ["block", "epoch"])
def test_padded_rows_hold_one_document_and_r_pad_is_the_pad_share(crafted, shuffle):
    loader = make(crafted, MixtureConfig(packing="padded", shuffle=shuffle), seq_len=32)
    pads = targets = 0
    for step in range(1, 21):
        for m in range(2):
            b = loader.batch(step, m)
            tgt = b.tokens[:, 1:]
            assert torch.equal(b.loss_mask, tgt != PAD)  # PAD never occurs inside a document here
            for row in b.tokens.tolist():  # one crafted document (a repeated token, EOS), then PAD only
                n = row.index(PAD) if PAD in row else len(row)
                assert len(set(row[:n]) - {EOS}) <= 1 and set(row[n:]) <= {PAD}
                assert EOS not in row[:n - 1]
            assert b.r_pad == pytest.approx((tgt == PAD).float().mean().item())
            pads, targets = pads + int((tgt == PAD).sum()), targets + tgt.numel()
        for src in loader.global_provenance(step):
            assert len(src.spans) == 1 and src.spans[0].start == 0
    assert pads > 0 and loader.plan()["r_pad_kind"] == "exact"
    assert loader.plan()["r_pad"] == pytest.approx(pads / targets)


# --------------------------------------------------------------------------- provenance
def test_provenance_points_at_the_tokens_really_in_the_batch(crafted):
    loader = make(crafted, CURRICULUM, world_size=2, rank=1)
    shards = {sh.prefix.relative_to(crafted.root).as_posix(): sh
              for b in crafted.buckets for sh in crafted.shards(b, "train")}
    for step in (2, 9, 18):
        sources = loader.global_provenance(step)
        ph = loader.phase_at(step)
        assert len(sources) == 2 * 2 * ph.rows
        assert [(s.rank, s.micro, s.row) for s in sources] == [
            (r, m, i) for r in range(2) for m in range(2) for i in range(ph.rows)]
        for m in range(2):
            tokens = loader.batch(step, m).tokens.numpy()
            mine = [s for s in sources if s.rank == 1 and s.micro == m]
            assert mine == loader.provenance(step, m)
            for src in mine:
                row = tokens[src.row]
                assert [sp.row_start for sp in src.spans][0] == 0
                assert sum(sp.end - sp.start for sp in src.spans) == ph.seq_len + 1
                for sp in src.spans:
                    shard = shards[sp.shard]
                    assert sp.shard.startswith(f"{src.bucket}/train-") and sp.bucket == src.bucket
                    assert np.array_equal(shard.doc(sp.doc)[sp.start:sp.end],
                                          row[sp.row_start:sp.row_start + sp.end - sp.start])
                    assert sp.doc_id == f"{sp.bucket}:{int(sp.shard[-5:])}:{sp.doc}"  # write_store's ids


# --------------------------------------------------------------------------- mixture and plan
def test_weights_are_respected_over_many_steps(crafted):
    mixture = MixtureConfig(weights={"x": 1.0, "y": 3.0})
    loader = make(crafted, mixture, micro_batch=3, grad_accum=1, max_steps=200)
    per_step = [[s.bucket for s in loader.global_provenance(step)] for step in range(1, 201)]
    y = np.cumsum([row.count("y") for row in per_step])
    n = 3 * np.arange(1, 201)
    assert np.abs(y - 0.75 * n).max() <= 1.5  # every prefix, not just on average
    assert loader.plan()["phases"][0]["bucket_samples"] == {"x": 150, "y": 450}
    default = make(crafted).plan()["phases"][0]["weights"]
    tx, ty = crafted.n_tokens("x", "train"), crafted.n_tokens("y", "train")
    assert default == pytest.approx({"x": tx / (tx + ty), "y": ty / (tx + ty)}, abs=1e-6)


def test_plan_counts_epochs_and_warns_on_repetition(crafted, caplog):
    with caplog.at_level(logging.WARNING):
        loader = make(crafted, CURRICULUM, max_steps=400)
    plan = loader.plan()
    assert plan["token_budget"] == 400 * 2 * 4 * 16 == plan["nominal_tokens"]
    y = plan["buckets"]["y"]
    assert y["epochs"] == pytest.approx(y["tokens"] / crafted.n_tokens("y", "train")) and y["epochs"] > 4
    assert y["warn"] and any("'y'" in w for w in plan["warnings"]) and "'y' is repeated" in caplog.text
    assert y["effective_tokens"] == pytest.approx(effective_tokens(y["available_tokens"], y["epochs"]))
    assert y["effective_tokens"] < y["tokens"]
    assert sum(p["samples"] for p in plan["phases"]) == sum(b["samples"] for b in plan["buckets"].values())
    assert [p["name"] for p in plan["phases"]] == ["short", "bulk", "anneal"] and plan["phases"][2]["anneal"]
    assert not make(crafted, CURRICULUM, max_steps=20).plan()["warnings"]  # 20 steps repeat nothing 4 times


def test_effective_tokens_follow_muennighoff():
    assert effective_tokens(100.0, 0.5) == 50.0 and effective_tokens(100.0, 1.0) == 100.0
    assert effective_tokens(100.0, 4.0) == pytest.approx(100 + 100 * 15.39 * (1 - np.exp(-3 / 15.39)))
    assert effective_tokens(100.0, 1e6) == pytest.approx(100 * 16.39)


# --------------------------------------------------------------------------- identity and errors
def test_fingerprint_changes_with_data_order_or_store_only(crafted, tmp_path):
    base = make(crafted)
    assert base.fingerprint() == make(crafted, MixtureConfig(prefetch=0, max_epochs_warn=9)).fingerprint()
    assert base.fingerprint() == make(crafted, grad_accum=1, world_size=2).fingerprint()  # same global batch
    for other in (make(crafted, MixtureConfig(weights={"x": 1, "y": 2})), make(crafted, seed=8),
                  make(crafted, MixtureConfig(doc_masking=False)), make(crafted, max_steps=21)):
        assert other.fingerprint().split("-")[0] == base.fingerprint().split("-")[0]
        with pytest.raises(MixtureError, match="data order changed"):
            other.check_fingerprint(base.fingerprint())
    changed = write_store(tmp_path / "other", {"x": [[5, 6, 7]], "y": [[4, 4]]})
    with pytest.raises(MixtureError, match="token store .* changed"):
        make(changed).check_fingerprint(base.fingerprint(), "step_10")
    base.check_fingerprint(make(crafted).fingerprint())
    assert base.cursor(10) == {"loader": "tokenmill-loader-v2", "next_step": 11, "next_micro": 0, "seed": 7,
                               "fingerprint": base.fingerprint()}


def test_clear_errors(crafted, tmp_path):
    with pytest.raises(MixtureError, match=r"\['web'\].*not in the token store"):
        make(crafted, MixtureConfig(weights={"x": 1.0, "web": 1.0}))
    empty = write_store(tmp_path / "e", {"x": [[3, 4]], "z": [[]]})
    with pytest.raises(MixtureError, match=r"\['z'\] that hold no training token"):
        make(empty, MixtureConfig(weights={"x": 1.0, "z": 1.0}))
    assert make(empty).plan()["buckets"].keys() == {"x"}  # default weights skip the empty bucket
    with pytest.raises(MixtureError, match="gets no optimizer step"):
        make(crafted, MixtureConfig(phases=[{"name": "a", "fraction": 0.01}, {"name": "b", "fraction": 0.99}]))
    with pytest.raises(MixtureError, match="rank 2 outside"):
        make(crafted, world_size=2, rank=2)
    loader = make(crafted)
    with pytest.raises(MixtureError, match="outside the run's optimizer steps"):
        loader.batch(21, 0)
    with pytest.raises(MixtureError, match="micro 2 outside"):
        loader.batch(1, 2)


def test_the_tiny_run_store_feeds_a_long_run(tiny_run):
    store = TokenStore(tiny_run.path / "tokens")
    loader = Loader(store, MixtureConfig(weights={"a": 1.0, "b": 1.0}), 32, 8, 2, 30, seed=11)
    b = loader.batch(30, 1)
    assert b.tokens.shape == (8, 33) and 0 < b.r_pad < 0.2


def test_sample_shuffle_is_a_bijection_per_phase_and_bucket(crafted):
    loader = make(crafted, CURRICULUM)
    for k, counts in enumerate(loader._counts):
        for bucket, n in counts.items():
            got = sorted(loader._shuffled(k, bucket, j) for j in range(n))
            assert got == list(range(n))  # every stream sample of the phase drawn exactly once
    big = {b: n for b, n in loader._counts[1].items() if n > 3}
    for bucket, n in big.items():
        assert [loader._shuffled(1, bucket, j) for j in range(n)] != list(range(n))  # really shuffled


def _docs_seen(loader: Loader) -> set[int]:
    """Distinct documents in every batch of the run (a crafted document's body token names it)."""
    seen: set[int] = set()
    for step in range(1, loader.max_steps + 1):
        for m in range(loader.grad_accum):
            seen |= {t for t in loader.batch(step, m).tokens.flatten().tolist() if t not in (EOS, PAD)}
    return seen


def test_epoch_shuffle_spreads_a_short_run_over_the_whole_bucket(tmp_path):
    """A run reading 2 % of a bucket: the block shuffle gives it the first few documents of the
    shuffled stream, the epoch shuffle windows from all over the bucket."""
    store = write_store(tmp_path / "tokens", {"x": [[64] * 200]})  # 12,800 tokens, 800 windows of 16
    block = make(store, MixtureConfig(), micro_batch=4, grad_accum=1, max_steps=4)
    epoch = make(store, MixtureConfig(shuffle="epoch"), micro_batch=4, grad_accum=1, max_steps=4)
    assert len(_docs_seen(block)) <= 6  # 16 windows of 16 tokens: 256 consecutive tokens, 4-5 documents
    assert len(_docs_seen(epoch)) >= 14  # 16 windows drawn from 800: nearly one document each
    windows = [epoch._shuffled(0, "x", j) for j in range(16)]
    assert len(set(windows)) == 16 and max(windows) > 400
    assert block.fingerprint() != epoch.fingerprint()


def test_epoch_shuffle_is_a_bijection_of_each_epoch_and_phases_never_reread(crafted):
    mixture = CURRICULUM.model_copy(update={"shuffle": "epoch"})
    loader = make(crafted, mixture, max_steps=40)
    for bucket in ("x", "y"):
        spans = []
        for k, ph in enumerate(loader.phases):
            n = loader._counts[k].get(bucket, 0)
            starts = [loader._offsets[k][bucket] + loader._shuffled(k, bucket, j) * ph.seq_len for j in range(n)]
            spans += [(s, s + ph.seq_len) for s in starts]
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no window read twice, across phases
    full = make(crafted, MixtureConfig(shuffle="epoch"), max_steps=40)
    block = full._blocks[0]["y"]
    n = full._counts[0]["y"]
    assert n > block  # more than an epoch: the first block is read whole, as a permutation
    assert sorted(full._shuffled(0, "y", j) for j in range(block)) == list(range(block))


@pytest.mark.parametrize("mixture", [MixtureConfig(), MixtureConfig(packing="padded")])
def test_token_id_past_the_vocabulary_names_its_shard_and_offset(crafted, mixture):
    """A corrupt id in a .bin: the batch that reads it is refused naming the file and the token's
    offset (not an IndexError in the embedding); batches that do not read it are unchanged."""
    loader = make(crafted, mixture)
    spans = loader.provenance(3, 1)[2].spans
    span = spans[-1]
    shard = next(s for s in crafted.shards(span.bucket, "train") if s.prefix.relative_to(crafted.root).as_posix() == span.shard)
    position = int(shard.offsets[span.doc]) + span.start
    untouched = make(crafted, mixture).batch(1, 0)
    bad = np.memmap(shard.paths[0], dtype=shard.dtype, mode="r+")
    bad[position] = VOCAB + 5
    bad.flush()
    del bad
    fresh = make(TokenStore(crafted.root), mixture)
    with pytest.raises(TokenStoreError) as err:
        fresh.batch(3, 1)
    msg = str(err.value)
    assert msg.startswith(f"{shard.paths[0]}: token id {VOCAB + 5} at token {position} "
                          f"(byte offset {position * shard.dtype.itemsize}; document {span.doc}, ")
    assert "\n" not in msg and "rerun `tokenmill tokenize CONFIG`" in msg
    readers = [(s, m) for s in range(1, 4) for m in range(2)
               if any(sp.shard == span.shard and sp.doc == span.doc and sp.start <= span.start < sp.end
                      for src in fresh.provenance(s, m) for sp in src.spans)]
    if (1, 0) not in readers:
        assert same(fresh.batch(1, 0), untouched)
