"""The continued-pretraining section (report/continued_section.py): source and forgetting table."""

from __future__ import annotations

from tokenmill.report.continued_section import section_continued


def _eval(step, **bpb):
    return {"step": step, "buckets": {b: {"bpb": v} for b, v in bpb.items()}}


EVENTS = [{"kind": "init_from", "from": "/runs/base/checkpoints", "format": "tokenmill", "step": 732}]


def test_before_and_after_per_slice_with_replay_marked():
    page = section_continued(EVENTS, [_eval(0, books=1.5, code=2.5), _eval(50, books=1.6, code=1.9)],
                             ["books"], 0.25)
    assert "tokenmill checkpoint at step 732" in page and "/runs/base/checkpoints" in page
    assert "25% of every batch from books" in page
    books = page[page.index("<td>books</td>"):page.index("<td>code</td>")]
    assert "original (replayed)" in books and '<span class="bad">+0.1000</span>' in books  # forgetting
    assert '<span class="good">-0.6000</span>' in page  # the new domain improved


def test_nothing_for_a_run_from_scratch_and_a_note_before_the_end():
    assert section_continued([], [_eval(0, a=1.0)], [], None) == ""
    page = section_continued(EVENTS, [_eval(0, a=1.0)], [], None)
    assert "No replay of the original data" in page and "Forgetting is measured once" in page
