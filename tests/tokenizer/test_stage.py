import json

import pytest

import tokenmill.tokenizer.stage as stage
from tokenmill.tokenizer.bpe import load_tokenizer, tokenizer_sha256
from tokenmill.tokenizer.sample import SampleConfigError
from tokenmill.runs import RunDir
from tokenmill.tokenizer.stage import run_tokenizer, tokenizer_file_sha256
from tokenmill.data.curated import iter_documents
from tokenmill.data.heldout_split import heldout_ids


def test_stage_writes_tokenizer_audit_and_event(curated_run):
    summary = run_tokenizer(curated_run)
    path = curated_run.sub("tokenizer", "tokenizer.json")
    tok = load_tokenizer(path)
    assert tok.get_vocab_size() == 512 == summary["vocab_size"]
    audit = json.loads(curated_run.sub("tokenizer", "audit.json").read_text())
    assert audit["tokenizer_sha256"] == tokenizer_sha256(path) == summary["tokenizer_sha256"]
    assert set(audit["buckets"]) == {"code", "prose"}
    for a in audit["buckets"].values():
        assert a["roundtrip_exact"] == 1.0 and a["docs"] >= 1
        assert {"bytes_per_token", "chars_per_token", "tokens_per_word", "byte_fallback_rate"} <= set(a)
    assert audit["special_ids"]["mask"] == 3 and audit["special_ids"]["sentinels"] == list(range(4, 36))
    assert set(audit["key_terms"]) == set(curated_run.config.tokenizer.key_terms)
    fast = json.loads(curated_run.sub("tokenizer", "fast_encode.json").read_text())
    assert fast["identical"] and fast["tokenizer_sha256"] == audit["tokenizer_sha256"]
    assert fast["docs"] == sum(s["docs"] for s in audit["sample"].values()) and fast == audit["fast_encoder"]
    assert "audit" in [e["kind"] for e in curated_run.events.read()]


def test_stage_is_deterministic(curated_run):
    run_tokenizer(curated_run)
    first = curated_run.sub("tokenizer", "tokenizer.json").read_text()
    run_tokenizer(curated_run)
    assert curated_run.sub("tokenizer", "tokenizer.json").read_text() == first


def test_sample_is_stratified_and_excludes_heldout(curated_run, monkeypatch):
    seen: list[str] = []
    real_train = stage.train_bpe

    def spy(texts, cfg):
        seen.extend(texts)
        return real_train(iter(seen), cfg)

    monkeypatch.setattr(stage, "train_bpe", spy)
    curated_run.config.tokenizer.bucket_bytes = {"prose": 20_000, "code": 60_000}
    run_tokenizer(curated_run)
    audit = json.loads(curated_run.sub("tokenizer", "audit.json").read_text())
    curated = curated_run.sub("curated")
    for bucket, budget in {"prose": 20_000, "code": 60_000}.items():
        docs = dict(iter_documents(curated, bucket))
        held = heldout_ids(list(docs), 0.1, 1, curated_run.config.seed)
        train_texts = {t for i, t in docs.items() if i not in held}
        mine = [t for t in seen if t in set(docs.values())]
        assert mine and all(t in train_texts for t in mine)  # held-out text never in the sample
        got = sum(len(t.encode()) for t in mine)
        assert got == audit["sample"][bucket]["bytes"] <= budget
        assert audit["sample"][bucket]["train_docs"] == len(train_texts)
    assert audit["sample_bytes"] == sum(len(t.encode()) for t in seen)


def test_unknown_bucket_in_budget_is_refused(curated_run):
    curated_run.config.tokenizer.bucket_bytes = {"prsoe": 1000}
    with pytest.raises(SampleConfigError, match="prsoe"):
        run_tokenizer(curated_run)


def test_sample_streams_from_disk_and_equals_the_rule_in_memory(curated_run, monkeypatch, no_whole_curated_column):
    """Partitions of 3 documents, no whole curated column ever read, the scratch removed after:
    the sample is exactly `select_documents` over each bucket's training documents."""
    import numpy as np

    from tokenmill.tokenizer.sample import bucket_budgets, select_documents

    seen: list[str] = []
    real_train = stage.train_bpe
    monkeypatch.setattr(stage, "train_bpe", lambda texts, cfg: real_train(iter(seen.extend(texts) or seen), cfg))
    cfg = curated_run.config.tokenizer
    cfg.sample_bytes, cfg.sample_partition_docs = 60_000, 3
    run_tokenizer(curated_run)
    assert not curated_run.sub("tokenizer.sample").exists()

    curated, seed = curated_run.sub("curated"), curated_run.config.seed
    train = {b: [(i, t) for i, t in iter_documents(curated, b)
                 if i not in heldout_ids([d for d, _ in iter_documents(curated, b)], 0.1, 1, seed)]
             for b in ("code", "prose")}
    budgets = bucket_budgets({b: sum(len(t.encode()) for _, t in d) for b, d in train.items()}, cfg)
    want = []
    for bucket, docs in train.items():
        keep = select_documents([i for i, _ in docs], np.array([len(t.encode()) for _, t in docs]), budgets[bucket],
                                seed, bucket)
        want += [t for (_, t), k in zip(docs, keep) if k]
    assert seen == want and 0 < sum(len(t.encode()) for t in seen) <= 60_000


def test_a_given_tokenizer_file_is_used_instead_of_training(curated_run, tmp_path):
    """tokenizer.file: the run encodes with that exact tokenizer (one tokenizer across an
    ablation's arms); its bytes are an input of the stage; a file without tokenmill's special
    tokens at their ids is refused."""
    from tokenmill.pipeline import run_pipeline
    from tokenmill.tokenizer.stage import TokenizerFileError

    run_pipeline(curated_run, ("tokenizer",))
    trained = curated_run.sub("tokenizer", "tokenizer.json")
    given = tmp_path / "given.json"
    given.write_bytes(trained.read_bytes())
    cfg = curated_run.config.model_copy(update={"tokenizer": curated_run.config.tokenizer.model_copy(
        update={"file": str(given), "vocab_size": 999})})  # vocab_size is the file's own
    other = RunDir.create(cfg.model_copy(update={"name": "other"}), tmp_path / "other")
    (other.sub("curated")).symlink_to(curated_run.sub("curated"))
    other.mark_done("curate")
    run_pipeline(other, ("tokenizer",))
    assert other.sub("tokenizer", "tokenizer.json").read_bytes() == trained.read_bytes()
    audit = json.loads(other.sub("tokenizer", "audit.json").read_text())
    assert audit["given"] == str(given) and audit["vocab_size"] == json.loads(
        curated_run.sub("tokenizer", "audit.json").read_text())["vocab_size"]
    assert other.is_fresh("tokenizer", tokenizer_file_sha256(other))
    given.write_text(given.read_text().replace('"<|endoftext|>"', '"<|eot|>"'))
    assert not other.is_fresh("tokenizer", tokenizer_file_sha256(other))  # a changed file: stale
    with pytest.raises(TokenizerFileError, match="special token '<\\|endoftext\\|>' has id None"):
        run_pipeline(other, ("tokenizer",))


def test_fingerprints_ignore_fields_left_at_their_later_default(curated_run):
    """Fields added after runs were made (tokenizer.file, decontaminate.set_max_overlap) stay out
    of the fingerprinted sections at their defaults, so earlier runs' stages stay fresh."""
    from tokenmill.runs import _without_disabled

    cfg = curated_run.config
    tok = _without_disabled("tokenizer", cfg.tokenizer.model_dump(mode="json"))
    cur = _without_disabled("curate", cfg.curate.model_dump(mode="json"))
    assert "file" not in tok and "set_max_overlap" not in cur["decontaminate"]
    assert "vocab_size" in tok and "max_overlap" in cur["decontaminate"]
    given = _without_disabled("tokenizer", cfg.tokenizer.model_copy(update={"file": "x.json"}).model_dump(mode="json"))
    assert given["file"] == "x.json"


def test_a_run_continuing_a_model_takes_that_models_tokenizer(curated_run, tmp_path):
    """train.init_from names a model whose run (or HF directory) holds a tokenizer.json: the
    tokenizer stage uses it instead of training, and the audit says where it came from."""
    from tokenmill.pipeline import run_pipeline

    run_pipeline(curated_run, ("tokenizer",))
    trained = curated_run.sub("tokenizer", "tokenizer.json")
    hf = tmp_path / "hf"  # an HF model directory: config.json + tokenizer.json
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "tokenizer.json").write_bytes(trained.read_bytes())
    for source in (str(curated_run.sub("checkpoints")), str(hf)):
        cfg = curated_run.config.model_copy(update={
            "name": "cont", "tokenizer": curated_run.config.tokenizer.model_copy(update={"vocab_size": 999}),
            "train": curated_run.config.train.model_copy(update={"init_from": source})})
        cont = RunDir.create(cfg, tmp_path / f"cont-{len(source)}")
        cont.sub("curated").symlink_to(curated_run.sub("curated"))
        cont.mark_done("curate")
        run_pipeline(cont, ("tokenizer",))
        assert cont.sub("tokenizer", "tokenizer.json").read_bytes() == trained.read_bytes()
        audit = json.loads(cont.sub("tokenizer", "audit.json").read_text())
        assert audit["inherited_from"] == source and audit["given"] == str(trained if "checkpoints" in source
                                                                            else hf / "tokenizer.json")
        assert tokenizer_file_sha256(cont) is not None and cont.is_fresh("tokenizer", tokenizer_file_sha256(cont))
