"""PII names and addresses: each context replaced by a typed placeholder, ordinary capitalised words,
code and dictionary text left alone, organisation addresses left, the acceptance numbers on the
committed real label file, and curate-eval's per-kind counts equal to a count done here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.curate_eval import eval_pii
from tokenmill.data.document import Doc
from tokenmill.data.steps.pii import Pii, find_pii, mask

LABELS = Path(__file__).parents[3] / "benchmarks" / "labels" / "pii_names.jsonl"
RECORDS = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
RUNNING = [json.loads(line) for line in LABELS.with_name("pii_names_running.jsonl").read_text(encoding="utf-8").splitlines() if line]


NEW_KINDS = ("name", "address")


def _masked(text: str, names: str = "any") -> str:
    return mask(text, find_pii(text, names=names))


@pytest.mark.parametrize("text, want", [
    (" -- Milan Kupcevic <milan@debian.org>  Sat, 09 Apr 2022 22:22:26 -0400",
     " -- <NAME> <<EMAIL>>  Sat, 09 Apr 2022 22:22:26 -0400"),
    (" -- bastian blank <waldi@debian.org>  Mon, 01 Jan 2024 10:00:00 +0000",  # trailer: any case
     " -- <NAME> <<EMAIL>>  Mon, 01 Jan 2024 10:00:00 +0000"),
    ("  [ Uwe Kleine-König ]\n  * Enable FOO\n", "  [ <NAME> ]\n  * Enable FOO\n"),
    ('Reply from "Jane Doe" <jane@example.org>', 'Reply from "<NAME>" <<EMAIL>>'),
    ("Patch from Jane Doe <jane@example.org>.", "Patch from <NAME> <<EMAIL>>."),
    ("From: bbb@ddd.com (John X. Doe)", "From: <EMAIL> (<NAME>)"),
    ("Signed-off-by: Ben Hutchings <ben@decadent.org.uk>", "Signed-off-by: <NAME> <<EMAIL>>"),
    ("Copyright (C) 1999-2003 Santiago Vila", "Copyright (C) 1999-2003 <NAME>"),
    ("© 2010 Иван Павлов <pavia00@gmail.com>", "© 2010 <NAME> <<EMAIL>>"),
    ("Dr. G.W. Wettstein met Mr Sherlock Holmes.", "Dr. <NAME> met Mr <NAME>."),
    ("Thanks to Jakub Wilk for the report, written by Linus Torvalds.", "Thanks to <NAME> for the report, written by <NAME>."),
    ("Regards,\nJohn Smith\n", "Regards,\n<NAME>\n"),
    ("Thanks to Alexandre Ghiti, Eduard Bloch and Craig Small (Closes: #1)", "Thanks to <NAME>, <NAME> and <NAME> (Closes: #1)"),
    ("__author__ = 'Bob Ippolito <bob@redivi.com>'", "__author__ = '<NAME> <<EMAIL>>'"),
    # after a credit cue: wrapped over a line break, a lone given name, a dictionary surname, particles, lists over lines
    ("(Contributed by Ross\n  Light; :issue:`4285`.)", "(Contributed by <NAME>; :issue:`4285`.)"),
    ("  * Applied patch from Kirk Hilliard.  Thanks, Kirk.\n", "  * Applied patch from <NAME>.  Thanks, <NAME>.\n"),
    ("(Contributed by Damien Miller.) (Fixed by Nir Aides in :issue:`1625`.)",
     "(Contributed by <NAME>.) (Fixed by <NAME> in :issue:`1625`.)"),
    ("Written by Just van Rossum and Paul Moore.", "Written by <NAME> and <NAME>."),
    ("(Contributed by Amaury Forgeot d'Arc and Antoine Pitrou.)", "(Contributed by <NAME> and <NAME>.)"),
    ("(Contributed by Dave Cole and Barry\n  Warsaw.)", "(Contributed by <NAME> and <NAME>.)"),
    ("and by Raymond Hettinger and\n  Antoine Pitrou in :issue:`10314`.", "and by <NAME> and\n  <NAME> in :issue:`10314`."),
    # acknowledgements: "Thank you's to", comments from, a long list with an Oxford comma, one item that is no name
    ("Thank you's to Randy Dunlap, Rolf Eike Beer and others", "Thank you's to <NAME>, <NAME> and others"),
    ("improved by comments from Johannes Berg, Roland\nDreier, Kay Sievers,\nVojtech Pavlik, Jan Kara, Josh Boyer, "
     "Kees Cook, Andrew Morton, Andi\nKleen, Vadim Lobanov, and Nishanth Aravamudan.",
     "improved by comments from <NAME>, <NAME>, <NAME>,\n<NAME>, Jan Kara, <NAME>, <NAME>, <NAME>, <NAME>, <NAME>, and <NAME>."),
    ("    Written by Ian A. Murdock, Revised 01/06/94\n", "    Written by <NAME>, Revised 01/06/94\n"),
])
def test_names_in_context_are_replaced_by_a_typed_placeholder(text, want):
    """The evidence rules themselves, as names="any" applies them (the default adds a privacy test on top)."""
    assert _masked(text) == want


@pytest.mark.parametrize("text", [
    "by Red Hat and from Default Settings, by the way; thanks to The Open Group",
    "class Default(Table):\n    def Will(self): return Grant(Access)\n",
    "Maintainer: Debian QA Group <packages@qa.debian.org>",
    "Copyright: (C) 1984-2008 Free Software Foundation, Inc.",
    "From: Mail Delivery Subsystem <MAILER-DAEMON@example.com>",
    "# See Message Id <87y3gtcwa2.fsf@hope.eyrie.org>",
    "Table Of Contents\nNew Features\nBug Fixes\nMay Contain Nuts\n",
    "inhabits streams from South Carolina to Florida",
    # a credit verb before "by" expects a person, but not a dictionary word, a bare product or a group
    "Fixed by Default Settings; reported by Red Hat; contributed by the Unladen Swallow team; Thanks, Python.",
    "the rows are sorted by\nName and then by Size\n",
])
def test_capitalised_words_organisations_and_code_are_not_names(text):
    found = find_pii(text, NEW_KINDS, names="any")
    assert found == [], [text[s.start:s.end] for s in found]


@pytest.mark.parametrize("text, want", [
    ("Ross McFluff: 155 Elm Street", "<NAME>: <ADDRESS>"),
    ("  820 4th St. N.\n  Fargo, ND  58122\n", "  <ADDRESS>\n"),
    ("59 Temple Place, Suite 330, Boston, MA 02111-1307", "<ADDRESS>"),
    ("write to PO Box 1234 or P.O. Box 5", "write to <ADDRESS> or <ADDRESS>"),
    ("Cambridge CB2 1TN, UK; D-80333 München", "<ADDRESS>, UK; <ADDRESS>"),
])
def test_addresses_are_replaced_and_blocks_joined(text, want):
    assert _masked(text) == want


@pytest.mark.parametrize("text", [
    "the Free Software Foundation, Inc., 51 Franklin Street, Fifth Floor, Boston, MA 02110-1301 USA",
    "Foundation, Inc., 59 Temple Place - Suite 330, Boston, MA  02111-1307, USA.",
    "BeOpen.com, having an office at 160 Saratoga Avenue, Santa Clara, CA 95051",
    "x = MA 02110; version 3 Main Loop; CB2 1TN alone; 100 Way",
])
def test_organisation_addresses_and_lookalikes_are_left(text):
    assert [s for s in find_pii(text) if s.kind == "address"] == []


def test_step_counts_typed_placeholders_and_kinds_can_be_switched_off():
    text = "Thanks to Jakub Wilk <jwilk@example.org>, 155 Elm Street, call +49 30 1234567."
    doc = Doc(id="d", text=text, source="s", url="u", bucket="b", license="l", format="text")
    assert Pii(CurateConfig()).process(doc) is None
    assert doc.text == "Thanks to <NAME> <<EMAIL>>, <ADDRESS>, call <PHONE>."
    assert (doc.pii["name"], doc.pii["address"], doc.pii["email"], doc.pii["phone"]) == (1, 1, 1, 1)
    off = Doc(id="d", text=text, source="s", url="u", bucket="b", license="l", format="text")
    Pii(CurateConfig(pii={"kinds": ["email", "phone"]})).process(off)
    assert off.text == "Thanks to Jakub Wilk <<EMAIL>>, 155 Elm Street, call <PHONE>."
    assert off.pii["name"] == off.pii["address"] == 0


def _covered(text: str, kinds: tuple[str, ...] = NEW_KINDS, names: str = "any") -> set[int]:
    """Characters masked; the label files mark every person name (credited authors too), so names="any"."""
    return {i for s in find_pii(text, kinds, names=names) for i in range(s.start, s.end)}


def test_acceptance_on_the_real_label_file_heldout_part():
    """Recall >= 0.9 on held-out names; no-name texts (code, dictionary, man pages) lose <= 2% of words."""
    held = [r for r in RECORDS if r["split"] == "heldout"]
    gold = hit = 0
    words = lost = 0
    for r in held:
        cov = _covered(r["text"])
        for s in r["pii"]:
            if s["kind"] == "name":
                gold += 1
                hit += all(i in cov for i in range(s["start"], s["end"]))
        if r["bucket"] in ("code", "dictionary", "manpage"):
            labelled = {i for s in r["pii"] for i in range(s["start"], s["end"])}
            pos = 0
            for w in r["text"].split():
                pos = r["text"].index(w, pos)
                words += 1
                lost += any(i in cov and i not in labelled for i in range(pos, pos + len(w)))
                pos += len(w)
    assert gold > 500 and hit / gold >= 0.9, (hit, gold)
    assert words > 20000 and lost / words <= 0.02, (lost, words)


@pytest.mark.parametrize("split, floor", [("fresh", 0.9), ("fresh2", 0.9)])
def test_running_text_names_on_the_fresh_hand_read_sets(split, floor):
    """Names in release notes, docs and code comments, each set annotated and committed before the detector
    saw it: recall at or above what was measured (results/pii_names.json), no false span."""
    gold = hit = false = 0
    for r in (r for r in RUNNING if r["split"] == split):
        cov = _covered(r["text"])
        for s in r["pii"]:
            gold += 1
            hit += all(i in cov for i in range(s["start"], s["end"]))
        labelled = {i for s in r["pii"] for i in range(s["start"], s["end"])}
        false += sum(not any(i in labelled for i in range(s.start, s.end)) for s in find_pii(r["text"], NEW_KINDS, names="any"))
    assert gold >= 50 and hit / gold >= floor and false == 0, (hit, gold, false)


def test_code_and_man_pages_without_names_lose_nothing():
    for r in RECORDS:
        if r["bucket"] in ("code", "manpage"):
            labelled = {i for s in r["pii"] for i in range(s["start"], s["end"])}
            extra = _covered(r["text"]) - labelled
            assert not extra, (r["key"], r["text"][min(extra):max(extra) + 1])


@pytest.mark.parametrize("names", ["private", "any"])
def test_curate_eval_per_kind_counts_equal_an_independent_count(tmp_path, names):
    recs = [r for r in RECORDS if r["bucket"] == "changelog"][:120] + [r for r in RECORDS if r["bucket"] in ("address", "dictionary")]
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps({k: r[k] for k in ("text", "bucket", "pii")}) + "\n" for r in recs), encoding="utf-8")
    cfg = CurateConfig(pii={"names": names})
    res = eval_pii(path, cfg)
    gold, recalled, false_spans = Counter(), Counter(), Counter()
    buckets: Counter = Counter()
    for r in recs:
        cov = _covered(r["text"], tuple(cfg.pii.kinds), names)  # a gold span masked by any kind is recalled
        labelled = {i for s in r["pii"] for i in range(s["start"], s["end"])}
        for s in r["pii"]:
            gold[s["kind"]] += 1
            ok = all(i in cov for i in range(s["start"], s["end"]))
            recalled[s["kind"]] += ok
            buckets[r["bucket"]] += ok
        for s in find_pii(r["text"], names=names):
            false_spans[s.kind] += not any(i in labelled for i in range(s.start, s.end))
    for kind in ("name", "address"):
        k = res["by_kind"][kind]
        assert (k["gold"], k["recalled"], k["false_spans"]) == (gold[kind], recalled[kind], false_spans[kind]) and gold[kind] > 0
    assert {b: v["recalled"] for b, v in res["by_bucket"].items()} == {b: buckets[b] for b in res["by_bucket"]}
    assert res["by_kind"]["name"]["over_removal"] is not None


# --------------------------------------------------------------------------- names="private" (the default)
# Invented prose in the manner of a novel, a sermon and a history: honorifics, full names, a credit.
PUBLIC_TEXT = [
    "Mr. Thornbury bowed to Miss Lydia Pembrook, and Sir Walter Ashcombe smiled at Dr. Grantly.\n"
    "Mrs. Pembrook said nothing; Lady Catherine Holloway and Colonel John Fairley laughed.",
    "And Moses spake unto Aaron his brother, and Lord Jehovah called unto Joshua the son of Nun: Be strong.",
    "Done in Convention by the unanimous consent of the States present, George Washington, President.",
    "Contributed by Ann Example.",
    "(Contributed by Ross\n  Light; :issue:`4285`.)  Thanks to Jakub Wilk for the report, written by Linus Torvalds.",
    "Copyright (C) 1999-2003 Santiago Vila\nAuthor: Fred L. Drake, Jr.\n",
    "Regards,\nJohn Smith\n",
    "  [ Uwe Kleine-König ]\n  * a bracketed name outside a changelog\n",
]


@pytest.mark.parametrize("text", PUBLIC_TEXT)
def test_default_leaves_characters_figures_and_credited_authors(text):
    assert _masked(text, "private") == text
    assert "<NAME>" in _masked(text)  # names="any" still replaces them


@pytest.mark.parametrize("text, want", [
    ("Contributed by Ann Example <ann@example.org>", "Contributed by <NAME> <<EMAIL>>"),
    ('Reply from "Jane Doe" <jane@example.org>; also bbb@ddd.com (John X. Doe)',
     'Reply from "<NAME>" <<EMAIL>>; also <EMAIL> (<NAME>)'),
    ("From: Jane Doe <jane@example.org>\nTo: John Roe\nCc: Ann Example\nSubject: minutes\n",
     "From: <NAME> <<EMAIL>>\nTo: <NAME>\nCc: <NAME>\nSubject: minutes\n"),
    ("Signed-off-by: Ben Hutchings <ben@decadent.org.uk>\nReviewed-by: Ann Example\n",
     "Signed-off-by: <NAME> <<EMAIL>>\nReviewed-by: <NAME>\n"),
    ("Maintainer: Jane Doe\nUploaders: John Roe, Ann Example\n", "Maintainer: <NAME>\nUploaders: <NAME>, <NAME>\n"),
    (" -- bastian blank <waldi@debian.org>  Mon, 01 Jan 2024 10:00:00 +0000",
     " -- <NAME> <<EMAIL>>  Mon, 01 Jan 2024 10:00:00 +0000"),
    ("  [ Uwe Kleine-König ]\n  * Enable FOO\n\n -- Jane Doe <jane@example.org>  Mon, 01 Jan 2024 10:00:00 +0000",
     "  [ <NAME> ]\n  * Enable FOO\n\n -- <NAME> <<EMAIL>>  Mon, 01 Jan 2024 10:00:00 +0000"),
    # a signature block: contact details on the name's line or the next
    ("Regards,\nJohn Smith\nPhone: +49 30 1234567\n", "Regards,\n<NAME>\nPhone: <PHONE>\n"),
    ("Thanks,\nJane Doe, 155 Elm Street\n", "Thanks,\n<NAME>, <ADDRESS>\n"),
    # other evidence beside contact details, on the same line or an adjacent one
    ("Copyright (C) 1999-2003 Santiago Vila\n  sanvila@example.org\n", "Copyright (C) 1999-2003 <NAME>\n  <EMAIL>\n"),
    ("Dr. Ann Example\n155 Elm Street\nBoston, MA 02110\n", "Dr. <NAME>\n<ADDRESS>\n"),
    ("Heather Albrecht, +1 555-123-4567.", "<NAME>, <PHONE>."),
])
def test_default_replaces_names_in_contact_and_signature_blocks(text, want):
    assert _masked(text, "private") == want


def test_default_needs_the_contact_beside_the_name_not_anywhere_in_the_document():
    text = "Mr. Thornbury bowed.\n\nA paragraph later.\n\nWrite to editor@example.org for copies.\n"
    assert _masked(text, "private") == "Mr. Thornbury bowed.\n\nA paragraph later.\n\nWrite to <EMAIL> for copies.\n"
    # A sign-off's contact details come after it: the line above does not count.
    assert _masked("call +49 30 1234567\n--\nJohn Smith\n", "private") == "call <PHONE>\n--\nJohn Smith\n"


def test_contact_details_mark_a_private_person_even_when_their_kind_is_kept():
    text = "Dr. Ann Example <ann@example.org>\nMr. John Roe\nann@example.org"
    found = find_pii(text, ["name"])  # e-mails kept, still evidence
    assert [text[s.start:s.end] for s in found] == ["Ann Example", "John Roe"]


def test_step_follows_the_names_setting():
    text = "Mr. Thornbury bowed to Miss Pembrook.\n\n -- Jane Doe <jane@example.org>  Mon, 01 Jan 2024 10:00:00 +0000"
    docs = {}
    for names in ("private", "any"):
        docs[names] = Doc(id="d", text=text, source="s", url="u", bucket="b", license="l", format="text")
        Pii(CurateConfig(pii={"names": names})).process(docs[names])
    assert docs["private"].text.startswith("Mr. Thornbury bowed to Miss Pembrook.\n\n -- <NAME> <<EMAIL>>")
    assert docs["any"].text.startswith("Mr. <NAME> bowed to Miss <NAME>.\n\n -- <NAME> <<EMAIL>>")
    assert (docs["private"].pii["name"], docs["any"].pii["name"]) == (1, 3)
    assert CurateConfig().pii.names == "private"
