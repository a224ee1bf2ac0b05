import json

from tokenmill.tokenizer.bpe import load_tokenizer
from tokenmill.tokenizer.stage import run_tokenizer


def test_stage_writes_tokenizer_audit_and_event(curated_run):
    summary = run_tokenizer(curated_run)
    tok = load_tokenizer(curated_run.sub("tokenizer", "tokenizer.json"))
    assert tok.get_vocab_size() == 512 == summary["vocab_size"]
    audit = json.loads(curated_run.sub("tokenizer", "audit.json").read_text())
    assert set(audit["buckets"]) == {"code", "prose"}
    assert all(a["roundtrip_exact"] == 1.0 and a["docs"] >= 1 for a in audit["buckets"].values())
    kinds = [e["kind"] for e in curated_run.events.read()]
    assert "audit" in kinds


def test_stage_is_deterministic(curated_run):
    run_tokenizer(curated_run)
    first = curated_run.sub("tokenizer", "tokenizer.json").read_text()
    run_tokenizer(curated_run)
    assert curated_run.sub("tokenizer", "tokenizer.json").read_text() == first
