"""The Data section against independent computations from a real curated run's files."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tokenmill.config import CurateConfig, SourceConfig, load_config
from tokenmill.data.curate import curate
from tokenmill.mixture.loader import Loader
from tokenmill.report import data_section as ds
from tokenmill.runs import RunDir
from tokenmill.tokens.store import TokenStore

SCRIPT_DOC = "<script>alert('pwned')</script> short & sweet"


def _topics() -> list[str]:
    import pydoc_data.topics as t

    return [t.topics[k] for k in sorted(t.topics) if len(t.topics[k]) > 1500][:14]


def _near_copy(text: str) -> str:
    words = text.split(" ")
    return " ".join(w + "x" if i % 100 == 7 else w for i, w in enumerate(words))


def _write_corpus(root: Path) -> None:
    """Real reference topics plus planted duplicates (a cluster of 4, one of 2, a near copy),
    short documents (one with markup) and a German one."""
    docs = _topics()
    texts = list(docs)
    texts += [docs[0]] * 3 + [docs[1]] + [_near_copy(docs[2])]
    texts += [SCRIPT_DOC, "tiny one", "another tiny document"]
    texts.append("Dies ist ein deutscher Text über das Wetter, die Berge und den Fluss. " * 12)
    root.mkdir(parents=True, exist_ok=True)
    (root / "c.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))


@pytest.fixture(scope="module")
def curated(tmp_path_factory) -> RunDir:
    tmp = tmp_path_factory.mktemp("data_section")
    _write_corpus(tmp / "src")
    run = RunDir.create(load_config(None, [f"root={tmp}", "name=ds"]))
    cfg = CurateConfig.model_validate({
        "sources": [SourceConfig(path=str(tmp / "src" / "c.jsonl"), bucket="reference")],
        "steps": ["normalize", "langid", "quality", "exact_dedup", "minhash_dedup"],
        "langid": {"languages": ["en"]},
        "quality": {"c4": False, "fineweb": False, "gopher_repetition": False},
        "workers": 1, "max_removal_share": 0.95})
    curate(cfg, run.sub("curated"), progress=False)
    return run


def _rejected(run: RunDir):
    return pq.read_table(run.sub("curated", "_rejected"))


def _kept(run: RunDir):
    return pq.read_table(run.sub("curated", "reference"))


def _text(page: str) -> str:
    """The page as text: tags dropped, entities decoded, cells separated by '|'."""
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    page = re.sub(r"</t[dh]>", "|", page)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_top_removal_reason_counts_equal_the_rejected_files(curated):
    rej = _rejected(curated)
    by_rule = Counter(zip(rej.column("step").to_pylist(), rej.column("rule").to_pylist()))
    ranked, total = ds.top_removals(curated)
    assert total == rej.num_rows
    assert {(r.step, r.rule): r.docs for r in ranked} == dict(by_rule)
    assert ranked[0].docs == max(by_rule.values())
    text = _text(ds.section_removals(curated))
    top = ranked[0]
    assert f"|{top.step}|{top.rule}|{top.docs:,}|" in text
    # bytes per rule equal the funnel's (the text as the removing step saw it)
    funnel = json.loads(curated.sub("curated", "_funnel.json").read_text())
    for r in ranked:
        assert r.bytes == funnel["total"][r.step]["rejected"][r.rule]["bytes"]
    assert all(1 <= len(r.examples) <= ds.EXAMPLES_PER_RULE for r in ranked)


def test_examples_are_escaped_and_short(curated):
    page = ds.section_removals(curated)
    assert "<script>" not in page and "&lt;script&gt;alert(" in page
    for pre in re.findall(r"<pre>(.*?)</pre>", page, flags=re.S):
        assert len(html.unescape(pre)) <= ds.EXCERPT_CHARS + 1


def test_duplicate_cluster_histogram_counts_the_kept_cluster_heads(curated):
    kept = _kept(curated)
    sizes = [s for s in kept.column("dup_cluster_size").to_pylist() if s and s >= 2]
    assert sorted(sizes) == [2, 2, 4]  # planted: one exact pair, one near pair, one of four copies
    page = ds.section_clusters(curated, ds.curated_parts(curated))
    text = _text(page)
    bins = Counter(ds.bin_label(ds.size_bin(s)) for s in sizes)
    assert "cluster size|2|3–4|" in text and f"|clusters|{bins['2']}|{bins['3–4']}|" in text
    rej = _rejected(curated)
    copies = Counter(h for h in rej.column("dup_cluster").to_pylist() if h)
    head = [i for i, s in zip(kept.column("id").to_pylist(), kept.column("dup_cluster_size").to_pylist()) if s == 4][0]
    assert copies[head] == 3 and f"|4|reference|{head}|duplicate_of 3|" in text
    assert "<svg" in page


def test_distributions_cover_every_kept_document(curated):
    kept = _kept(curated)
    n = kept.num_rows
    text = _text(ds.section_distributions(ds.curated_parts(curated)))
    langs = Counter(kept.column("language").to_pylist())
    assert f"|en|{langs['en']:,}|{langs['en']:,}|" in text and f"|all|{n:,}|{n:,}|" in text
    scores = kept.column("language_score").to_numpy()
    med = np.percentile(scores, 50)
    assert f"|language score|reference|{n:,}|" in text and f"{med:.4g}" in text
    wl = pc.struct_field(kept.column("quality"), "mean_word_len").to_numpy()
    assert f"|mean word length (chars)|reference|{n:,}|{np.percentile(wl, 10):.4g}|" in text


def test_funnel_rows_are_the_funnel_file(curated):
    funnel = json.loads(curated.sub("curated", "_funnel.json").read_text())
    text = _text(ds.section_funnel(funnel))
    for step in funnel["steps"]:
        c = funnel["total"][step]
        assert f"|{step}|{c['docs_in']:,}|{c['docs_out']:,}|{c['docs_in'] - c['docs_out']:,}|" in text
    assert "funnel of bucket reference" in text
    # every document's fate under its language: the kept ones are the curated rows' languages
    kept = Counter(_kept(curated).column("language").to_pylist())
    langs = funnel["languages"]
    assert sum(c["docs"] for c in langs.values()) == funnel["total"][funnel["steps"][0]]["docs_in"]
    assert {lang: c["kept"] for lang, c in langs.items() if c["kept"]} == dict(kept)
    assert f"|en|{langs['en']['docs']:,}|{kept['en']:,}|" in text


def test_effective_tokens_apply_the_seed_formula(curated):
    funnel = json.loads(curated.sub("curated", "_funnel.json").read_text())
    f = funnel["d_eff"]["buckets"]["reference"]
    plan = {"buckets": {"reference": {"tokens": 10_000, "effective_tokens": 9_000.0}}, "r_pad": 0.1,
            "effective_tokens": 9_000.0, "effective_rule": "rule"}
    want = 10_000 * (1 - f["r_dup"]) * (1 - 0.1) * f["rho_parse"] * f["rho_quality"]
    assert f["r_dup"] > 0  # the planted duplicates count
    text = _text(ds.section_effective(funnel, plan, None))
    assert f"|reference|10,000|" in text and f"|{want:,.0f}|9,000|" in text


def test_planned_vs_delivered_equals_the_loaders_own_batches(tiny_run):
    from tokenmill.config import MixtureConfig

    tc = tiny_run.config.train
    mixture = MixtureConfig.model_validate({"phases": [
        {"name": "a-heavy", "fraction": 0.5, "weights": {"a": 3.0, "b": 1.0}},
        {"name": "even", "fraction": 0.5, "weights": {"a": 1.0, "b": 1.0}, "seq_len": 16}]})
    loader = Loader(TokenStore(tiny_run.sub("tokens")), mixture, tc.seq_len, tc.micro_batch, tc.grad_accum,
                    tc.max_steps, tiny_run.config.seed)
    trained = 22  # inside the second phase
    events = [{"kind": "train_start", "step": 0, "plan": loader.plan()}]
    events += [{"kind": "train_step", "step": s} for s in range(1, trained + 1)]
    samples, tokens = Counter(), Counter()
    for s in range(1, trained + 1):
        seq = loader.phase_at(s).seq_len
        for src in loader.global_provenance(s):
            samples[src.bucket] += 1
            tokens[src.bucket] += seq
    got, exact = ds.delivered(loader.plan(), trained)
    assert exact and {b: d["samples"] for b, d in got.items()} == dict(samples)
    text = _text(ds.section_planned_vs_delivered(events))
    for b, u in loader.plan()["buckets"].items():
        assert f"|{b}|{u['available_tokens']:,}|{u['tokens']:,}|" in text
        assert f"|{samples[b]:,}|{tokens[b]:,}|" in text
    loader.close()


def test_trained_steps_count_replays_once():
    plan = {"fingerprint": "f", "max_steps": 10}
    ev = [{"kind": "train_start", "step": 0, "plan": plan}]
    ev += [{"kind": "train_step", "step": s} for s in (1, 2, 3, 4)]
    ev += [{"kind": "train_start", "step": 2, "plan": plan}]  # resumed from step 2
    ev += [{"kind": "train_step", "step": s, "action": "skip" if s == 5 else "apply"} for s in (3, 4, 5)]
    done = ds.trained_steps(ev, plan)
    assert (done.steps, done.replayed, done.skipped) == (5, 2, 1)


def test_run_without_curated_data_renders_placeholders(tmp_path):
    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=empty"]))
    page = ds.section_data(run, [])
    for msg in ("No curated/_funnel.json yet", "No rejected documents", "No duplicate clusters",
                "No curated documents yet", "No tokenizer/audit.json yet", "No training plan yet"):
        assert msg in page


def test_whole_section_renders_on_a_curated_run(curated):
    page = ds.section_data(curated, [])
    assert page.startswith("<h2>Data</h2>") and page.count("<svg") >= 4
    assert not re.search(r"""(src|href)=["']https?://""", page)


def test_tokenizer_audit_shows_the_audit_and_token_store(tokenized_run):
    audit = json.loads(tokenized_run.sub("tokenizer", "audit.json").read_text())
    meta = json.loads(tokenized_run.sub("tokens", "_meta.json").read_text())
    page = ds.section_tokenizer(tokenized_run, meta)
    text = _text(page)
    for b, a in audit["buckets"].items():
        assert f"|{b}|{a['docs']:,}|{a['bytes']:,}|{a['tokens']:,}|{a['bytes_per_token']:.4g}|" in text
    for b, d in meta["buckets"].items():
        assert f"|{b}|{d['train']['docs']:,}|{d['train']['tokens']:,}|{d['val']['docs']:,}|" in text
    term, v = next(iter(audit["key_terms"].items()))
    assert f"|{term}|" in text and "<svg" in page
