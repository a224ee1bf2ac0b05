"""The funnel: docs_in = kept + rejected at every step, and one step's out is the next one's in."""

from __future__ import annotations

import json

from tokenmill.data.funnel import STEPS, Funnel, StepMark, UNDETERMINED


def _through(funnel: Funnel, bucket: str, n: int, stop: str | None = None, rule: str | None = None) -> None:
    for step in STEPS:
        if step == stop:
            funnel.record(bucket, StepMark(step, n, 0, True, rule))
            return
        funnel.record(bucket, StepMark(step, n, n, step != "extract"))


def test_counts_and_invariants(tmp_path):
    f = Funnel()
    _through(f, "web", 100)
    _through(f, "web", 50, stop="quality", rule="min_words")
    _through(f, "web", 30, stop="read", rule="bad_json")
    _through(f, "code", 10, stop="exact_dedup", rule="duplicate_of")
    _through(f, "code", 10)
    assert f.violations() == []
    data = f.write(tmp_path / "_funnel.json")
    assert json.loads((tmp_path / "_funnel.json").read_text()) == data
    assert data["steps"] == list(STEPS)
    web = data["buckets"]["web"]
    assert web["read"]["docs_in"] == 3 and web["read"]["docs_out"] == 2
    assert web["read"]["rejected"] == {"bad_json": {"docs": 1, "bytes": 30}}
    assert web["quality"]["rejected"]["min_words"] == {"docs": 1, "bytes": 50}
    assert web["extract"]["docs_skipped"] == 2
    total = data["total"]
    for step in STEPS:
        c = total[step]
        assert c["docs_in"] == c["docs_out"] + sum(r["docs"] for r in c["rejected"].values())
    assert total["exact_dedup"]["docs_out"] == 2
    assert total["read"]["docs_in"] == 5
    assert data["d_eff"]["buckets"]["code"]["r_dup"] == 0.5
    assert data["d_eff"]["total"]["rho_parse"] == 4 / 5


def test_violations_are_reported():
    f = Funnel()
    f.record("web", StepMark("read", 1, 1))
    f.record("web", StepMark("normalize", 1, 1))  # skipped extract: the chain is broken
    assert any("normalize" in p for p in f.violations())


def test_sources_counts():
    f = Funnel()
    f.source_in("s", "web", 10)
    f.source_in("s", "web", 5)
    f.source_out("s", 4)
    assert f.to_dict()["sources"]["s"] == {"bucket": "web", "docs_in": 2, "bytes_in": 15,
                                           "docs_out": 1, "bytes_out": 4}


def test_languages_count_each_documents_fate_once_and_survive_a_merge():
    a, b = Funnel(), Funnel()
    _through(a, "web", 10)
    a.outcome("en", None)
    _through(a, "web", 10, stop="quality", rule="min_stop_words")
    a.outcome("zh", StepMark("quality", 10, 0, True, "min_stop_words"))
    _through(b, "web", 10, stop="quality", rule="mean_word_len")
    b.outcome("zh", StepMark("quality", 10, 0, True, "mean_word_len"))
    _through(b, "web", 5, stop="read", rule="bad_json")
    b.outcome(None, StepMark("read", 5, 0, True, "bad_json"))
    a.merge(Funnel.from_dict(b.to_dict()))
    assert a.violations() == []
    langs = a.to_dict()["languages"]
    assert langs["zh"] == {"docs": 2, "kept": 0, "keep_rate": 0.0,
                           "rejected": {"quality/mean_word_len": 1, "quality/min_stop_words": 1}}
    assert langs["en"]["keep_rate"] == 1.0 and langs[UNDETERMINED]["rejected"] == {"read/bad_json": 1}
    a.outcome("en", None)  # a fate counted twice breaks the invariant
    assert any("languages" in p for p in a.violations())


def test_a_funnel_from_before_languages_were_counted_drops_the_claim():
    new, old = Funnel(), Funnel()
    _through(new, "web", 10)
    new.outcome("en", None)
    _through(old, "web", 10)
    legacy = old.to_dict()
    del legacy["languages"]
    new.merge(Funnel.from_dict(legacy))
    assert new.violations() == [] and "languages" not in new.to_dict()


def test_license_counts_merge_round_trip_and_are_not_claimed_after_an_older_funnel():
    a, b = Funnel(), Funnel()
    a.license_bytes("MIT", bytes_in=100)
    a.outcome("en", None, "prose", "MIT")
    a.license_bytes("MIT", bytes_kept=80)
    b.license_bytes("MIT", bytes_in=50)
    b.outcome("en", StepMark("license", 50, 0, True, "missing_training"), "prose", "MIT")
    b.license_bytes("unknown", bytes_in=7)
    b.outcome(None, StepMark("quality", 7, 0, True, "min_words"), None, "unknown")
    a.merge(Funnel.from_dict(b.to_dict()))
    mit = a.to_dict()["licenses"]["MIT"]
    assert (mit["docs"], mit["kept"], mit["bytes_in"], mit["bytes_kept"]) == (2, 1, 150, 80)
    assert mit["removed_by_policy"] == 1 and mit["removed_by_other_steps"] == 0
    assert a.to_dict()["licenses"]["unknown"]["removed_by_other_steps"] == 1
    assert Funnel.from_dict(a.to_dict()).to_dict()["licenses"] == a.to_dict()["licenses"]
    older = b.to_dict()
    del older["licenses"]
    a.merge(Funnel.from_dict(older))
    assert "licenses" not in a.to_dict()


def test_files_read_names_a_bounded_prefix_and_hashes_the_whole_list():
    """However many files a source read, the funnel keeps `listed` names, the count and a SHA-256 of
    the full list (one name a line), computed from a stream: a generator is consumed once."""
    import hashlib

    from tokenmill.data.funnel import files_read

    names = [f"in/part-{i:05d}.jsonl" for i in range(2500)] + ["dump[1].jsonl", "b\udcffad.jsonl"]
    got = files_read((n for n in names), listed=1000)
    full = b"".join(n.encode("utf-8", "surrogateescape") + b"\n" for n in names)
    assert got == {"count": 2502, "sha256": hashlib.sha256(full).hexdigest(), "names": names[:1000], "all_named": False}
    assert files_read(["dump[1].jsonl"])["names"] == ["dump[1].jsonl"] and files_read(["a"])["all_named"] is True
    assert files_read([]) == {"count": 0, "sha256": hashlib.sha256(b"").hexdigest(), "names": [], "all_named": True}


# --------------------------------------------------------------------------- PII replacements
def test_pii_replacements_are_counted_per_bucket_with_few_examples(tmp_path):
    from tokenmill.data.funnel import PII_EXAMPLES

    f, g = Funnel(), Funnel()
    for i in range(5):
        f.pii_replaced("mail", {"name": 2, "email": 1, "phone": 0}, f"From: <NAME> <<EMAIL>> and <NAME> {i}")
    f.pii_replaced("mail", {"name": 0, "email": 0}, "nothing replaced")
    g.pii_replaced("mail", {"name": 1}, "Regards, <NAME>")
    g.pii_replaced("books", {"address": 1}, "write to <ADDRESS>")
    f.merge(g)
    data = f.write(tmp_path / "_funnel.json")
    mail = data["pii"]["mail"]
    assert mail["docs"] == 6 and mail["kinds"] == {"email": 5, "name": 11}
    assert len(mail["examples"]["name"]) == PII_EXAMPLES == 2  # bounded however many documents
    assert mail["examples"]["name"][0] == "…From: <NAME> <<EMAIL>> and <NAME> 0…"
    assert data["pii"]["books"] == {"docs": 1, "kinds": {"address": 1}, "examples": {"address": ["…write to <ADDRESS>…"]}}
    assert Funnel.from_dict(data).to_dict()["pii"] == data["pii"]
    old = {k: v for k, v in data.items() if k != "pii"}  # a chunk written before replacements were counted
    merged = Funnel.from_dict(data)
    merged.merge(Funnel.from_dict(old))
    assert "pii" not in merged.to_dict()  # no partial counts claimed


def test_curate_funnel_and_report_show_the_replacements_of_the_kept_rows(tmp_path):
    import pyarrow.parquet as pq

    from tokenmill.config import CurateConfig, SourceConfig
    from tokenmill.data.curate import curate
    from tokenmill.report.data_section import pii_table

    texts = ["Mr. Thornbury bowed to Miss Pembrook and left the room without a word to anyone there.",
             "From: Jane Doe <jane@example.org>\nTo: John Roe\n\nThe minutes of the meeting follow below.",
             "Regards,\nAnn Example\nPhone: +49 30 1234567\n\nplease call me back about the invoice."]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = CurateConfig.model_validate({"sources": [SourceConfig(path=str(tmp_path / "c.jsonl"), bucket="mail")],
                                       "steps": ["normalize", "pii"], "workers": 1})
    summary = curate(cfg, tmp_path / "out", progress=False)
    assert summary["pii_replaced"] == {"name": 3, "email": 1, "phone": 1}
    funnel = json.loads((tmp_path / "out" / "_funnel.json").read_text())
    rows = pq.read_table(tmp_path / "out" / "mail").to_pylist()
    want = {k: sum(dict(r["pii"])[k] for r in rows) for k in ("name", "email", "phone")}
    assert want == {"name": 3, "email": 1, "phone": 1}
    assert funnel["pii"]["mail"]["docs"] == 2 and funnel["pii"]["mail"]["kinds"] == want
    page = pii_table(funnel["pii"])
    assert "<td>mail</td><td>2</td><td>3</td>" in page and "Regards, &lt;NAME&gt; Phone: &lt;PHONE&gt;" in page
    assert pii_table({}) == "<p>PII: nothing was replaced in the kept documents.</p>" and pii_table(None) == ""
