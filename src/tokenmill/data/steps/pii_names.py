"""Person names and postal addresses for the PII step: word lists plus context, never a bare capital.

A capitalised word is usually not a name: sentence starts, headings, class names, dictionary
head-words ("Default", "Table", "Will", "Brown"). So a name is masked only with evidence, strongest
first:

  context      the text says a person is here: a Debian changelog trailer (" -- Jane Doe <j@x>"),
               an e-mail display name ('"Jane Doe" <j@x>', 'Jane Doe <j@x>', 'j@x (Jane Doe)'),
               a Debian team-upload line ("  [ Jane Doe ]"),
               a header or trailer field (From:, To:, Cc:, Author:, Maintainer:, Uploaders:,
               Signed-off-by: and the other *-by: tags), a copyright holder ("Copyright (C) 2001
               Jane Doe"), an honorific (Mr, Mrs, Ms, Dr, Prof, Sir ...), a sign-off line after
               "--", "Regards," or "Thanks,". Any capitalised run there is a name unless it holds an
               organisation word (Foundation, Inc, Team, Project, University ...).
  cue + list   after "by", "from", "thanks to", "patch by", "courtesy of": two or more capitalised
               words whose first is a given name, or none of which is an ordinary English word
               ("Thanks to Jakub Wilk", not "by Red Hat" nor "from Default Settings").
               After a credit ("Contributed by", "Patch from", "written and implemented by", "Thanks,")
               a lone given name ("Thanks, Kirk"), a first word no dictionary knows ("Nir Aides") or
               a particle ("Just van Rossum", "Forgeot d'Arc") is enough; a one-word run at a line end
               goes on at the next line ("Ross\n  Light"), and a list may wrap ("Cole and Barry\n Warsaw").
  list only    a given name that is not also an English word ("Linus", not "Mark") followed by a
               surname that is either not an English word or a known proper noun ("Linus Torvalds",
               "John Smith"), not "Jack Russell terrier" ... unless the surname is an ordinary word.

Word lists (resources/pii_*.txt) were derived once from the Debian miscfiles propernames list and
SCOWL american-english by benchmarks/build_pii_name_lists.py; nothing is downloaded.

Addresses: a street line (house number, 1-4 capitalised words, a street suffix: Street, St, Ave,
Road, Blvd, Lane, Drive, Way ...; then ", Suite 330" / ", Fifth Floor"), a PO box, and a town
line ("Boston, MA 02110-1301", "Cambridge CB2 1TN", "D-80333 München"); a street line followed
by a town line on the same or the next line is one address block.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Iterator

RESOURCES = Path(__file__).with_name("resources")

# How strongly the text marks the person as private (names="private" in PiiConfig):
CONTACT = "contact"  # a contact or signature block: e-mail display name, changelog trailer, mail header field
SIGNOFF = "signoff"  # a sign-off line: private only with contact details on its line or the next
NEAR = "near"  # honorific, credit, copyright holder, Author:, word list: private only beside contact details

# A capitalised word (Unicode letters; O'Brien, Jean-Pierre, McDonald) or an initial ("J.").
_WORD = r"[^\W\d_][^\W\d_]*(?:['’-][^\W\d_]+)*"
_PARTICLE = r"(?:van|von|de|da|del|della|der|den|di|du|dos|la|le|bin|ibn|al|ter|zu)"
# Capitalised words (Latin-1, Latin Extended-A, Greek and Cyrillic capitals too: Érik, Łukasz, Иван), initials, particles.
_CAP_WORD = r"[A-ZÀ-ÖØ-ÞĀ-žΑ-ΩА-ЯЁ][^\W\d_]*(?:['’-][^\W\d_]+)*"
_INITIALS = r"(?:[A-Z]\.)+"
# An elided particle glued to a capitalised word: "Amaury Forgeot d'Arc".
_ELIDED = rf"[dl]['’]{_CAP_WORD}"
# One blank between words: a run of spaces separates columns of a signature block, not names.
_SEQ = rf"(?:{_INITIALS}|{_CAP_WORD})(?:[ \t](?:{_INITIALS}|{_CAP_WORD}|{_ELIDED}|{_PARTICLE}\b))*"
_SEQ_RE = re.compile(_SEQ)
_ORG_WORDS = frozenset(
    "Foundation Inc Inc. Ltd Ltd. LLC GmbH Corp Corporation Company Co Team Group Project Projects University Institute "
    "Consortium Association Society Software Systems System Technologies Labs Laboratories Maintainers Developers Authors "
    "Contributors Community Debian GNU Linux Apache Mozilla Microsoft Google Oracle Sun IBM Intel Regents Trust Council "
    "Committee Organization Organisation Office Department Government List Mailing Support Server Bot Robot Administrator "
    "Packages Package QA Release Security Press Publishing Books Media Network Networks Services Solutions Unknown Various "
    "Janitor Mail Delivery Subsystem Daemon Postmaster Webmaster Admin Center Centre Hospital School College Bank Museum Library".split()
)
# Capitalised words that are never a name word even when no dictionary says so.
_STOP = frozenset(
    "The A An This That These Those It Its In On At Of For And Or But Not No Yes If When Then Than With Without By From To "
    "As Is Are Was Were Be Been He She They We You I My Our Your His Her Their Me Us All Any Some Each Every New Old See "
    "Note Also Use Using Used Fix Fixed Add Added Remove Removed Update Updated Closes Thanks Thank Patch Patches "
    "January February March April May June July August September October November December "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday Mon Tue Wed Thu Fri Sat Sun Jan Feb Mar Apr Jun Jul Aug Sep "
    "Oct Nov Dec Re Fwd Subject Date Message".split()
)
# Each context is its own pattern, and the word-level ones start with a character class and test the
# word boundary after it: the regex engine then jumps between candidate first characters instead of
# trying a dozen alternatives at every position (one alternation of all of them was 2-5x slower).
_CONTEXTS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.MULTILINE)
    for p in (
        r"^[ \t]*--[ \t]+(?P<trailer>[^<\n]{2,80}?)[ \t]*<",  # Debian changelog trailer
        rf"^[ \t]+\[ (?P<bracket>{_SEQ}) \][ \t]*$",  # "  [ Jane Doe ]": whose changes follow in a team upload
        r"^[ \t>#*/;%-]*(?:(?:Signed-off|Acked|Reviewed|Tested|Reported|Suggested|Co-authored|Co-developed|Written|Requested)-by"
        r"|Author|Authors|Maintainer|Maintainers|Uploaders?|From|To|Cc|Bcc|Reply-To|Sender|Translator|Packager|Contact)"
        r"[ \t]*:[ \t]*(?P<field>[^\n]{2,})",
        r"(?:Copyright|\([Cc]\)|©)[ \t:]*(?:\([Cc]\)|©)?[ \t,]*(?:\d{4}(?:[ \t]*[-–,][ \t]*\d{2,4})*[ \t,]+)+(?:by[ \t]+)?"
        r"(?P<holder>[^\n]{2,})",
        r"[DLMPSHF](?<!\w.)(?:(?<=D)(?:r|ame)|(?<=M)(?:rs|r|s|x|iss|me|lle)|(?<=P)rof(?:essor)?|(?<=S)ir|(?<=L)(?:ady|ord)"
        rf"|(?<=H)err|(?<=F)rau)\.?[ \t]+(?P<honorific>{_SEQ})",  # Mr, Mrs, Ms, Dr, Prof, Sir ...
        r"^[ \t]*(?:--|-|Regards|Best regards|Kind regards|Cheers|Thanks|Sincerely|Yours|Best)[ \t]*[,!]?[ \t]*\n"
        rf"[ \t]*(?P<signoff>{_SEQ})[ \t]*$",
        r"[BbFfTtCc](?<!\w.)(?:(?<=[Bb])y|(?<=[Ff])rom|(?<=[Tt])hank(?:s|[ \t]+you(?:['’]s)?)(?:[ \t]+to|,)?|(?<=[Cc])ourtesy[ \t]+of|(?<=[Cc])redits?[ \t]+to"
        rf"|(?<=[Cc])c)(?:[ \t]+|[ \t]*\n[ \t]*)(?P<cue>{_SEQ})",  # by, from, thanks (to), courtesy of, credit(s) to, cc
    )
)
# The name before an e-mail in angle brackets (also POD's E<lt>), or in parentheses after one.
_DISPLAY_BEFORE = re.compile(rf"(?:\"(?P<quoted>[^\"\n<>]{{2,80}})\"|(?P<bare>{_SEQ}))[ \t]*$")
_EMAIL_OPEN = re.compile(r"(?:<|E<lt>)[^<>\s@]+@[^<>\s]+")
_DISPLAY_AFTER = re.compile(r"[\w.+-]@[\w.-]+\.\w+[ \t]+\((?P<paren>[^()\n]{2,60})\)")


@cache
def _words(name: str) -> frozenset[str]:
    text = (RESOURCES / name).read_text(encoding="utf-8")
    return frozenset(w for w in text.splitlines() if w and not w.startswith("#"))


def given_names() -> frozenset[str]:
    return _words("pii_given_names.txt")


def proper_nouns() -> frozenset[str]:
    return _words("pii_proper_nouns.txt")


def english_words() -> frozenset[str]:
    return _words("pii_english_words.txt")


def _is_name_word(w: str) -> bool:
    if _ELIDED_RE.fullmatch(w):
        return True
    return w[0].isupper() and not (len(w) > 2 and w.isupper()) and w not in _STOP and w.rstrip(".") not in _ORG_WORDS


def _dictionary(w: str) -> bool:
    return w.lower() in english_words()


def _ordinary(w: str) -> bool:
    """An English word ("Default", "Table"), unless also a known proper noun or given name ("Brown")."""
    return _dictionary(w) and w not in proper_nouns() and w not in given_names()


_INITIAL = re.compile(_INITIALS)
_ELIDED_RE = re.compile(_ELIDED)
_PARTICLE_RE = re.compile(_PARTICLE)


def _name_run(text: str, start: int, end: int, min_words: int = 1, from_end: bool = False) -> tuple[int, int] | None:
    """The run of name words (initials, particles inside) that opens (or closes) text[start:end]."""
    seqs = list(_SEQ_RE.finditer(text, start, end)) if from_end else [_SEQ_RE.search(text, start, end)]
    m = seqs[-1] if seqs else None
    if m is None:
        return None
    toks = list(re.finditer(r"\S+", m.group()))
    if any(t.group().rstrip(".,") in _ORG_WORDS for t in toks):
        return None
    run: list[re.Match[str]] = []
    for t in reversed(toks) if from_end else toks:
        w = t.group()
        if _is_name_word(w) or _INITIAL.fullmatch(w) or (run and _PARTICLE_RE.fullmatch(w)):
            run.append(t)
        else:
            break
    if from_end:
        run.reverse()
    while run and not _is_name_word(run[-1].group()):  # "Jane Doe de" ends at "Doe"
        run.pop()
    while run and not _is_name_word(run[0].group()) and not _INITIAL.fullmatch(run[0].group()):
        run.pop(0)
    if sum(1 for t in run if _is_name_word(t.group())) < min_words:
        return None
    return m.start() + run[0].start(), m.start() + run[-1].end()


def _cue_ok(text: str, s: int, e: int, credit: bool = False, listed: bool = False) -> bool:
    """Whether the run after a cue is a person: "Thanks to Jakub Wilk", not "by Red Hat" nor "from Default Settings".

    After a credit ("Contributed by", "Patch from", "Thanks to") a person is expected, so a lone given
    name ("Thanks, Kirk"; further down a list only one no dictionary knows: "and Tobias", not
    ", Revised 1994"), a first word no dictionary knows ("Damien Miller", "Nir Aides") or a particle
    inside the run ("Just van Rossum") is enough.
    """
    run = text[s:e].split()
    words = [w for w in run if _is_name_word(w)]
    if credit and len(words) == 1:
        return words[0] in given_names() and words[0] not in _STOP and not (listed and _dictionary(words[0]))
    if len(words) < 2:
        return False
    if credit and (not _dictionary(words[0]) or any(_PARTICLE_RE.fullmatch(w) for w in run[1:-1])):
        return True
    # "from South Carolina": "South" is a proper noun too, but also a plain English word.
    return words[0] in given_names() or not any(_dictionary(w) for w in words)


# The verb before "by" / "from" that makes it a credit: "(Contributed by ...", "PEP written and implemented by".
_CREDIT_VERB = re.compile(
    r"(?:contributed|patch(?:es|ed)?|written|reported|suggested|implemented|designed|proposed|fixed|added|noted|spotted"
    r"|provided|reviewed|maintained|developed|reworked|submitted|sponsored|translated|translation|fix|fixes|idea|work"
    r"|code|bug|report|help|original|originally|updated|rewritten|ported|debugged|diagnosed|found|investigated|tested"
    r"|comments?|articles?|discussion|recommendation|suggestions?|input|feedback|reviews?|ideas?|improved|improvements)"
    r"[ \t]*\n?[ \t]*$",
    re.IGNORECASE,
)


def _is_credit(text: str, cue_start: int) -> bool:
    """A cue that credits a person: thanks, courtesy of, credit to, or "by"/"from" after a credit verb."""
    if text[cue_start] not in "BbFf":
        return text[cue_start] in "Tt" or text[cue_start + 1] in "or"  # thanks / courtesy, credit (not "cc")
    return _CREDIT_VERB.search(text, max(0, cue_start - 40), cue_start) is not None


_WRAP = re.compile(r"[ \t]*\n[ \t]*(?=[^\W\d_])")


def _wrap(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """A one-word run at a line end goes on at the next line's start: "(Contributed by Ross\n  Light; ...)"."""
    s, e = span
    if len(text[s:e].split()) != 1:
        return span
    gap = _WRAP.match(text, e)
    if gap is None:
        return span
    nxt = _name_run(text, gap.end(), min(len(text), gap.end() + 80))
    if nxt is None or nxt[0] != gap.end():
        return span
    return s, nxt[1]


# Header and trailer fields of mail, patches and Debian control files: a contact block whatever else
# the line holds. "Author:", "Translator:", "Contact:" ... also head a book or a documentation page, so
# they count only beside contact details (NEAR).
_CONTACT_FIELD = re.compile(
    r"[ \t>#*/;%-]*(?:[\w-]+-by|From|To|Cc|Bcc|Reply-To|Sender|Maintainers?|Uploaders?)[ \t]*:", re.IGNORECASE
)
# A Debian changelog trailer anywhere in the text: its "  [ Jane Doe ]" lines name contributors.
_CHANGELOG_TRAILER = re.compile(r"^ -- [^<\n]+<[^>\n]+>  ", re.MULTILINE)


def _field_evidence(text: str, start: int) -> str:
    """CONTACT for a mail, patch or control-file header field, NEAR for Author:, Translator: and the like."""
    line_start = text.rfind("\n", 0, start) + 1
    return CONTACT if _CONTACT_FIELD.match(text, line_start) else NEAR


def _context_names(text: str) -> Iterator[tuple[int, int, str]]:
    changelog: bool | None = None  # looked up once, at the first "[ Name ]" line
    for m in (m for pattern in _CONTEXTS for m in pattern.finditer(text)):
        group = m.lastgroup
        assert group is not None
        s, e = m.span(group)
        if group == "field":  # a header holds several names: "To: A B <a@x>, C D"
            evidence = _field_evidence(text, m.start())
            for part in re.finditer(r"[^,;<>()\"]+", text[s:e]):
                span = _name_run(text, s + part.start(), s + part.end(), min_words=1)
                if span and "@" not in text[span[0] : span[1]]:
                    yield *span, evidence
            continue
        if group == "trailer":  # structural: whatever stands between "-- " and "<" is the uploader
            if not any(w.rstrip(".,") in _ORG_WORDS for w in text[s:e].split()):
                yield s, e, CONTACT
            continue
        span = _name_run(text, s, e)
        if span is None:
            continue
        credit = group == "cue" and _is_credit(text, m.start())
        if group == "cue":
            span = _wrap(text, span)
            if not _cue_ok(text, *span, credit=credit):
                continue
        if group == "signoff" and len(text[span[0] : span[1]].split()) == 1 and text[span[0] : span[1]] not in given_names():
            continue
        evidence = SIGNOFF if group == "signoff" else NEAR
        if group == "bracket":  # a contributor of a changelog entry; elsewhere "[ Name ]" marks no one
            changelog = _CHANGELOG_TRAILER.search(text) is not None if changelog is None else changelog
            evidence = CONTACT if changelog else NEAR
        yield *span, evidence
        if group == "cue":
            yield from ((*listed, NEAR) for listed in _cue_list(text, span[1], credit))


# ", " / " and " / " & " between listed names, either side of a line break: "Dave Cole and Barry\n  Warsaw".
_LIST_SEP = re.compile(
    rf"(?:[ \t]*,(?:[ \t]*\n?[ \t]*and)?[ \t]*\n?[ \t]*(?<=\s)|[ \t]*\n?[ \t]+and[ \t]*\n?[ \t]*(?<=\s)|[ \t]*&[ \t]*)(?={_SEQ})"
)


def _cue_list(text: str, end: int, credit: bool) -> Iterator[tuple[int, int]]:
    """The names that follow a credited one in a list: "Thanks to Alexandre Ghiti, Eduard Bloch and ..."."""
    missed = False
    for _ in range(40):  # acknowledgements list 20 names and more
        sep = _LIST_SEP.match(text, end)
        if sep is None:
            return
        span = _name_run(text, sep.end(), min(len(text), sep.end() + 80))
        if span is not None and span[0] == sep.end():
            span = _wrap(text, span)
        if span is None or span[0] != sep.end() or not _cue_ok(text, *span, credit=credit, listed=True):
            # One item that is not a name ("Jan Kara": "Jan" is a month) does not end a list of names.
            skipped = _SEQ_RE.match(text, sep.end())
            if skipped is None or missed:
                return
            missed, end = True, skipped.end()
            continue
        missed = False
        yield span
        end = span[1]


def _display_names(text: str) -> Iterator[tuple[int, int, str]]:
    for m in _EMAIL_OPEN.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        head = text[max(line_start, m.start() - 100) : m.start()]
        d = _DISPLAY_BEFORE.search(head)
        if d:
            base = m.start() - len(head)
            g = "quoted" if d.group("quoted") else "bare"
            # A bare name is the run of name words just before the address: "Patch from Jane Doe <j@x>".
            span = _name_run(text, base + d.start(g), base + d.end(g), from_end=g == "bare")
            if span and span[1] - span[0] > 2:  # "See Message Id <...@...>": a lone two-letter word is no name
                yield *span, CONTACT
    for m in _DISPLAY_AFTER.finditer(text):
        span = _name_run(text, *m.span("paren"))
        if span:
            yield *span, CONTACT


_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")
_SURNAME_AFTER = re.compile(rf"(?:[ \t]+[A-Z]\.)?[ \t]+(?:{_PARTICLE}[ \t]+)?(?P<last>{_WORD})\b")


_NEXT_WORD = re.compile(r"[ \t]+(?:[A-Z]\w*[ \t]+)?([A-Z]\w*)")


def _free_names(text: str) -> Iterator[tuple[int, int]]:
    """A given name followed by a surname-like word: "Linus Torvalds", "John Smith", "Heather Albrecht".

    A given name that is not an English word takes any surname that is not an ordinary word; one
    that is ("Mark", "Will", "Heather") only a surname no dictionary knows ("Will Return" stays).
    """
    given = given_names()
    for m in _CAPITALISED.finditer(text):
        first = m.group()
        if first not in given or first in _STOP:
            continue
        c = _SURNAME_AFTER.match(text, m.end())
        if c is None:
            continue
        last = c.group("last")
        if not _is_name_word(last) or len(last) < 3 or _SUFFIX_RE.fullmatch(last):
            continue
        after = _NEXT_WORD.match(text, c.end())
        if after and after.group(1) in _ORG_WORDS:  # "Roger Maris Cancer Center" is a place
            continue
        if not _ordinary(last) if not _dictionary(first) else not _dictionary(last):
            yield m.start(), c.end()


def evidenced_names(text: str) -> Iterator[tuple[int, int, str]]:
    """Candidate person-name spans with their evidence (CONTACT, SIGNOFF or NEAR), possibly overlapping."""
    yield from _context_names(text)
    yield from _display_names(text)
    yield from ((s, e, NEAR) for s, e in _free_names(text))


def names(text: str) -> Iterator[tuple[int, int]]:
    """Candidate person-name spans on any evidence (possibly overlapping; the caller keeps the first of each overlap)."""
    for s, e, _ in evidenced_names(text):
        yield s, e


# --------------------------------------------------------------------------- addresses
_STREET_SUFFIX = (
    r"(?:Street|St|Avenue|Ave|Av|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Square|Sq|Terrace|Way|Parkway"
    r"|Pkwy|Highway|Hwy|Circle|Plaza|Row|Crescent|Close|Gardens|Park|Strasse|Straße|Str)"
)
_SUFFIX_RE = re.compile(_STREET_SUFFIX)
_STREET = re.compile(  # first a digit, then "not inside a longer token": see the note on _CONTEXTS
    rf"\d(?<![\w.,/-]\d)\d{{0,4}}[A-Za-z]?(?:[ \t]+(?:[NSEW]\.?|North|South|East|West))?"
    rf"(?:[ \t]+(?:\d+(?:st|nd|rd|th)|[A-Z][\w'’-]+)){{1,4}}"
    rf"[ \t]+{_STREET_SUFFIX}\b\.?(?:[ \t]+[NS]?[EW]?\.(?!\w)|[ \t]+(?:NE|NW|SE|SW)\b)?"
    r"(?:(?:,|[ \t]+-)?[ \t]*(?:(?:Suite|Ste|Apt|Unit|Floor|Room|Rm)\.?[ \t]*#?\w+|#\w+|\w+[ \t]+Floor))?"
)
_PO_BOX = re.compile(
    r"[PpB](?<!\w.)(?:(?<=P)\.?[ \t]?O\.?[ \t]?Box|(?<=P)ost[ \t]+Office[ \t]+Box|(?<=P)ostfach|(?<=B)P)[ \t]+\d{1,6}\b"
)
_US_STATES = frozenset(
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY NC ND OH OK OR PA RI SC "
    "SD TN TX UT VT VA WA WV WI WY".split()
)
# A town line is found from its code (a class-first pattern), then the town words are matched backwards.
_TOWN_CODE = re.compile(
    r"[A-Z](?<![\w-][A-Z])(?:(?P<us>[A-Z][ \t]+\d{5}(?:-\d{4})?(?![\w-]))"  # MA 02110-1301 (state checked below)
    r"|(?P<uk>[A-Z]?\d[A-Z\d]?[ \t]\d[ABD-HJLNP-UW-Z]{2}(?!\w))"  # CB2 1TN
    r"|(?P<de>[A-Z]?-\d{4,5}[ \t]+[A-Z][\w'’-]+))"  # D-80333 München
)
_TOWN_BEFORE = re.compile(r"[A-Z][\w'’.-]+(?:[ \t]+[A-Z][\w'’.-]+){0,2},?[ \t]+$")
# Between a street line and its town: ", " or a line break (or both), at most one word ("Fifth Floor" is in the street).
_BLOCK_GAP = re.compile(r"[ \t]*,?[ \t]*\n?[ \t]*(?:[A-Z][\w'’-]+[ \t]*,?[ \t]*)?")


def _organisation_before(text: str, start: int) -> bool:
    """An organisation's address ("Free Software Foundation, Inc., 51 Franklin Street") locates no person."""
    before = text[max(0, start - 60) : start].split()[-2:]
    return any(w.strip('.,;:()"') in _ORG_WORDS or w.lower() in _OFFICE_WORDS for w in before)


# "... having an office at 1895 Preston White Drive": the address of a business.
_OFFICE_WORDS = frozenset({"office", "offices", "headquarters", "located", "headquartered"})


def _towns(text: str) -> list[tuple[int, int]]:
    """Town lines: "Boston, MA 02110-1301", "Cambridge CB2 1TN" (town words before the code), "D-80333 München"."""
    out = []
    for m in _TOWN_CODE.finditer(text):
        if m.group("de"):
            out.append(m.span())
            continue
        if m.group("us") and m.group()[:2] not in _US_STATES:
            continue
        before = _TOWN_BEFORE.search(text, max(0, m.start() - 60), m.start())
        if before:
            out.append((before.start(), m.end()))
    return out


def addresses(text: str) -> Iterator[tuple[int, int]]:
    """Street lines joined with a following town line, PO boxes, town lines (each yielded once)."""
    towns = _towns(text)
    used: set[int] = set()
    for m in _STREET.finditer(text):
        end = m.end()
        for i, (ts, te) in enumerate(towns):
            if ts >= end and i not in used and _BLOCK_GAP.fullmatch(text, end, ts):
                end = te
                used.add(i)
                break
        if not _organisation_before(text, m.start()):
            yield m.start(), end
    for m in _PO_BOX.finditer(text):
        if not _organisation_before(text, m.start()):
            yield m.span()
    for i, (ts, te) in enumerate(towns):
        if i not in used and not _organisation_before(text, ts):
            yield ts, te
