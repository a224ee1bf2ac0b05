"""The console lines of an in-training evaluation."""

from tokenmill.eval.progress_lines import bucket_lines


def test_one_line_per_bucket_with_the_unigram_ratio_where_there_is_a_baseline():
    buckets = {
        "web": {"bpb": 1.2, "unigram_bpb": 2.0, "docs": 12, "tokens": 9876, "loss": 3.1},
        "code": {"bpb": 0.9, "docs": 3, "tokens": 400},  # a baseline is not always there
    }
    assert bucket_lines(125, buckets) == [
        "eval step 125 · code: 0.900 bits/byte (3 docs, 400 tokens)",
        "eval step 125 · web: 1.200 bits/byte, 0.600 of the unigram's 2.000 (12 docs, 9,876 tokens)",
    ]
    assert bucket_lines(7, {}) == []
