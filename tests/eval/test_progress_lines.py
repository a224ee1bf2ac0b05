"""The console lines of an in-training evaluation."""

from tokenmill.eval.progress_lines import bucket_lines


def test_one_line_per_bucket_with_the_unigram_ratio_where_there_is_a_baseline():
    buckets = {
        "web": {"bpb": 1.2, "unigram_bpb": 2.0, "docs": 12, "tokens": 9876, "loss": 3.1},
        "code": {"bpb": 0.9, "docs": 3, "tokens": 400},  # a baseline is not always there
    }
    assert bucket_lines(125, buckets) == [
        "eval step 125 · code: 0.900 bits/byte (3 documents, 400 tokens)",
        "eval step 125 · web: 1.200 bits/byte, 0.600 of the unigram's 2.000 (12 documents, 9,876 tokens)",
    ]
    assert bucket_lines(7, {}) == []


def test_the_interval_is_beside_the_figure_and_one_document_is_singular():
    with_ci = {"bpb": 1.2, "bpb_ci_low": 1.1, "bpb_ci_high": 1.3, "docs": 12, "tokens": 9876}
    alone = {"bpb": 1.5, "bpb_ci_low": None, "bpb_ci_high": None, "docs": 1, "tokens": 1}
    assert bucket_lines(3, {"a": with_ci, "b": alone}) == [
        "eval step 3 · a: 1.200 ± 0.100 bits/byte (12 documents, 9,876 tokens)",
        "eval step 3 · b: 1.500 (no interval: 1 document) bits/byte (1 document, 1 token)",
    ]
