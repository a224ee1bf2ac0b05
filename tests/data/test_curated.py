import pytest

from tokenmill.data.curated import curated_buckets, document_ids, iter_documents


def test_buckets_skip_rejected_and_rows_in_order(curated_run):
    (curated_run.path / "curated" / "_rejected").mkdir()
    cur = curated_run.path / "curated"
    assert curated_buckets(cur) == ["code", "prose"]
    docs = list(iter_documents(cur, "prose", batch_rows=7))
    assert [d for d, _ in docs] == document_ids(cur, "prose")
    assert len(docs) == 40 and all(t for _, t in docs)


def test_missing_dir_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenmill curate"):
        curated_buckets(tmp_path / "nope")
