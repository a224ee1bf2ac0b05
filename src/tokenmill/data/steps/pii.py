"""PII masking: personal identifiers replaced by typed placeholders, counts on the row.

PII handling comes in layers: site rules, then "coarse pattern matching: emails, phone
numbers, ID numbers", then NER. This is the pattern layer, with names and postal addresses found
from word lists and context (pii_names.py) in place of an NER model. Each kind is a regular expression
that finds candidates and a validator that keeps only real ones, because the danger is
over-removal: a masked version number or date is training text lost, and code is full
of dotted and dashed digits. What is found, and what is deliberately not:

  email        local@domain.tld (TLD of 2+ letters, not followed by ".name": `x@self.w.T` is
               Python). <EMAIL>
  ip           IPv4 (octets 0–255, no leading zeros, not part of a longer dotted number, not
               after "version", "section", "§" or "802.11") and IPv6 (parsed by `ipaddress`,
               3+ non-empty groups), only when the address is globally routable: 127.0.0.1,
               10.x, 192.168.x and the documentation ranges identify nobody. <IP>
  iban         country code, 2 check digits, BBAN of the country's registered length, and the
               ISO 13616 mod-97 checksum equal to 1 (before cards: an IBAN's digits can pass
               a card's Luhn check). <IBAN>
  card         13–19 digits, contiguous or in the printed groupings (4-4-4-4[-3], Amex 4-6-5,
               Diners 4-6-4), with an issuer prefix (Visa, Mastercard, Amex, Discover, JCB,
               Diners, UnionPay) and a valid Luhn checksum, not inside a table of numbers.
               <CARD>
  national_id  US SSN ddd-dd-dddd without the never-issued areas 000, 666, 9xx, group 00 or
               serial 0000; UK National Insurance numbers (AB 12 34 56 C, the unused prefixes
               excluded). Undashed nine-digit numbers are too ambiguous to mask. <ID>
  phone        "+" and a country code followed by 8–15 digits in all; a parenthesised area
               code ("(030) 1234567"); the North American 555-123-4567 / 555.123.4567; a
               national number with a trunk 0 ("030 1234567", "01 23 45 67 89", "0171/123456")
               of 9–11 digits. Seven-digit local numbers and undelimited digit runs are not
               masked: "962-7873" and "5551234567" look like too many other things. <PHONE>

  address      street line (house number, capitalised street words, a suffix: Street, Ave,
               Road ...; ", Suite 330"), PO box, town line ("Boston, MA 02110-1301", "Cambridge
               CB2 1TN", "D-80333 München"), a street and its town joined into one block; not an
               organisation's address ("Free Software Foundation, Inc., 51 Franklin Street").
               <ADDRESS>
  name         person names from context (changelog trailers and "[ Name ]" lines, e-mail display
               names, From:/Signed-off-by:/Author:/Copyright holders, honorifics, sign-offs, "by",
               "thanks to") or from the shipped given-name list followed by a surname that is no
               ordinary English word. A lone capitalised word, a dictionary head-word or a code
               identifier is never a name. pii_names.py has the rules and where the lists come from;
               measured on real changelogs, copyright files, mail headers, code, dictionaries and
               man pages in benchmarks/results/pii_names.json. At names="private" (the default,
               private_names) only names the text marks as a private person's are kept: contact and
               signature blocks, or other evidence beside an e-mail, phone or address; names="any"
               keeps every evidenced name. <NAME>

Detectors run in the order email, ip, iban, card, national_id, address, phone, name; where two
candidates overlap, the earlier kind wins (an email's digits are never a phone). Text without "@" skips the email scan, text without a
digit skips the numeric ones and addresses (~11–16 MB/s on one core on real code, docs and books
for the pattern kinds; names and addresses make the step about 3x slower: 2.1 ms vs 0.74 ms
for a 5 KB document). The step
never removes a document; it rewrites doc.text and fills doc.pii with the count of each kind
(keys of PII_FIELDS). Measured on 110 MB of real code, man pages, changelogs and books
(/work/real_corpora): no card, IBAN or ID false positive; the phone matches are example
numbers in documentation and one time stamp.
"""

from __future__ import annotations

import ipaddress
import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Literal

from tokenmill.data.document import PII_FIELDS, Doc, Rejection
from tokenmill.data.step import DocStep
from tokenmill.data.steps.pii_names import CONTACT, SIGNOFF, addresses, evidenced_names, names

# 3: names="private" (the default) replaces only names the text marks as a private person's.
VERSION = "3"

PLACEHOLDERS: dict[str, str] = {
    "email": "<EMAIL>",
    "ip": "<IP>",
    "iban": "<IBAN>",
    "card": "<CARD>",
    "national_id": "<ID>",
    "phone": "<PHONE>",
    "address": "<ADDRESS>",
    "name": "<NAME>",
}
# Addresses before phones (a ZIP+4 is never a phone, but a street line holds digits), names last.
PRIORITY: tuple[str, ...] = ("email", "ip", "iban", "card", "national_id", "address", "phone", "name")
NEEDS_DIGIT = frozenset({"ip", "iban", "card", "national_id", "address", "phone"})
assert set(PRIORITY) == set(PII_FIELDS) == set(PLACEHOLDERS)


@dataclass(frozen=True, slots=True)
class Span:
    """[start, end) of one identifier in the text, and its kind."""

    start: int
    end: int
    kind: str


# --------------------------------------------------------------------------- checksums
def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of payment card numbers: double every second digit from the right."""
    if not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """ISO 13616: registered length for the country, and mod 97 of the rearranged number == 1."""
    iban = iban.replace(" ", "").upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban[2:4].isdigit() or not iban.isalnum():
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


# IBAN length per country (SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NL": 18,
    "NO": 15,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "SA": 24,
    "SC": 31,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
}

# Issuer identification prefixes (first digits) of the card networks.
_CARD_IIN = re.compile(
    r"4"  # Visa
    r"|5[1-5]|2(?:22[1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)"  # Mastercard 51-55, 2221-2720
    r"|3[47]|3(?:0[0-5]|[689])|35(?:2[89]|[3-8]\d)"  # Amex, Diners, JCB 3528-3589
    r"|6(?:011|4[4-9]|5|2)"  # Discover, UnionPay
)
_CARD_GROUPS: frozenset[tuple[int, ...]] = frozenset(
    {
        (4, 4, 4, 1),
        (4, 4, 4, 2),
        (4, 4, 4, 3),
        (4, 4, 4, 4),
        (4, 4, 4, 4, 1),
        (4, 4, 4, 4, 2),
        (4, 4, 4, 4, 3),
        (4, 6, 5),
        (4, 6, 4),
    }
)

# --------------------------------------------------------------------------- patterns
# Every pattern starts with a character class and puts its "not inside a longer token" test in
# a lookbehind after that first character: the regex engine then skips ahead with its fast
# first-character scan instead of trying the lookbehind at every position (3-4x faster).

# An e-mail is found from its "@" (a literal the engine finds with a fast search): the domain
# is matched forward, the local part backward on the reversed text before it.
# The TLD is lower, upper or capitalised case: Perl POD writes "E<lt>kane@cpan.orgE<gt>".
_EMAIL_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+(?:[A-Za-z][a-z]{1,23}|[A-Z]{2,24})"
    r"(?:(?![\w-]|\.[A-Za-z0-9])|(?=E<))"
)
_EMAIL_LOCAL_REVERSED = re.compile(r"[A-Za-z0-9._%+-]{0,63}[A-Za-z0-9](?![\w.%+-])")
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?!\w|\.\d)")
_IPV6 = re.compile(r"[0-9A-Fa-f:](?<![\w:.][0-9A-Fa-f:])[0-9A-Fa-f]{0,3}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
# Dotted quads after these words are versions or standard section numbers ("IEEE 802.11
# 7.3.2.2", "section 9.4.2.251"), not addresses.
_VERSION_CONTEXT = re.compile(
    r"(?:version|release|\bv(?:er)?|section|sect?\.|§|clause|chapter|\d{3}\.\d+[a-z]*)[\s:=\"'(]*$", re.IGNORECASE
)
# Not inside a run of numbers either: "542F 5430 5431 5432 5433 5440" is a table, not a card.
_CARD = re.compile(
    r"\d(?<![\w.,/-]\d)(?<![0-9A-Fa-f]{4}[\s-]\d)(?:[ -]?\d){12,18}"
    r"(?!\w|[.,/-]\d|\s[0-9A-Fa-f]{4,6}(?![0-9A-Za-z]))"
)
_IBAN = re.compile(r"[A-Z](?<![\w-][A-Z])[A-Z]\d\d(?: ?[A-Z0-9]){11,30}(?![\w-])")
_SSN = re.compile(r"\d(?<![\w-]\d)\d\d-\d\d-\d{4}(?!\w|-\d)")
_NINO = re.compile(r"[A-CEGHJ-PR-TW-Z](?<![\w-][A-Z])[A-CEGHJ-NPR-TW-Z] ?\d\d ?\d\d ?\d\d ?[A-D](?!\w)")
_NINO_UNUSED = frozenset({"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"})
_NOT_IN_TOKEN = r"(?<![\w+.,/-]"  # completed per alternative with its first character
# "83 3c 01 00 00 89 44 24": byte dumps look like "01 23 45 67 89" phone numbers.
_HEX_PAIRS = r"[0-9A-Fa-f]{2} [0-9A-Fa-f]{2}"
_PHONE = re.compile(
    r"(?:"
    rf"\+{_NOT_IN_TOKEN}\+)\d{{1,3}}(?:[ .-]?\(\d{{1,4}}\))?(?:[ .-]?\d{{1,5}}){{2,6}}"  # +cc ...
    rf"|\({_NOT_IN_TOKEN}\()\d{{2,5}}\)[ .-]?\d{{2,5}}(?:[ .-]?\d{{2,5}}){{0,3}}"  # (area) rest
    rf"|\d{_NOT_IN_TOKEN}\d)\d\d([.-])\d{{3}}\1\d{{4}}"  # 555-123-4567
    rf"|0{_NOT_IN_TOKEN}0)(?<!{_HEX_PAIRS} 0)[1-9]\d{{0,3}}(?:[ /-]\d{{2,8}}){{1,4}}(?! {_HEX_PAIRS})"  # 030 1234567
    r")(?!\w|[.,/-]\d)"
)
_DIGIT = re.compile(r"\d")
_NON_DIGIT = re.compile(r"\D")


def _digits(s: str) -> str:
    return _NON_DIGIT.sub("", s)


# --------------------------------------------------------------------------- detectors
def _emails(text: str) -> Iterator[tuple[int, int]]:
    at = text.find("@")
    while at != -1:
        m = _EMAIL_DOMAIN.match(text, at + 1)
        if m:
            local = _EMAIL_LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
            if local:
                yield at - local.end(), m.end()
        at = text.find("@", at + 1)


def _ipv4_ok(text: str, m: re.Match[str]) -> bool:
    try:
        address = ipaddress.IPv4Address(m.group())  # rejects octets > 255 and leading zeros
    except ValueError:
        return False
    return address.is_global and not _VERSION_CONTEXT.search(text, max(0, m.start() - 16), m.start())


def _ipv6_ok(s: str) -> bool:
    if sum(1 for g in s.split(":") if g) < 3 or not _DIGIT.search(s):
        return False
    try:
        return ipaddress.IPv6Address(s).is_global
    except ValueError:
        return False


def _ips(text: str) -> Iterator[tuple[int, int]]:
    for m in _IPV4.finditer(text):
        if _ipv4_ok(text, m):
            yield m.span()
    if "::" in text or text.count(":") >= 7:
        for m in _IPV6.finditer(text):
            if _ipv6_ok(m.group()):
                yield m.span()


def _card_ok(s: str) -> bool:
    digits = _digits(s)
    if not 13 <= len(digits) <= 19 or not _CARD_IIN.match(digits):
        return False
    seps = set(re.findall(r"[ -]", s))
    if len(seps) > 1:
        return False
    if seps and tuple(len(g) for g in re.split(r"[ -]", s)) not in _CARD_GROUPS:
        return False
    return luhn_valid(digits)


def _cards(text: str) -> Iterator[tuple[int, int]]:
    for m in _CARD.finditer(text):
        if _card_ok(m.group()):
            yield m.span()


def _ibans(text: str) -> Iterator[tuple[int, int]]:
    for m in _IBAN.finditer(text):
        s = m.group()
        want = IBAN_LENGTHS.get(s[:2])
        if want is None:
            continue
        # The pattern may run on into a following word ("... 3000 ABCD"): cut at the length.
        n = end = 0
        while end < len(s) and n < want:
            n += s[end] != " "
            end += 1
        if n == want and (end == len(s) or s[end] == " ") and iban_valid(s[:end]):
            yield m.start(), m.start() + end


def _ssn_ok(s: str) -> bool:
    area, group, serial = s.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _national_ids(text: str) -> Iterator[tuple[int, int]]:
    for m in _SSN.finditer(text):
        if _ssn_ok(m.group()):
            yield m.span()
    for m in _NINO.finditer(text):
        if m.group()[:2] not in _NINO_UNUSED:
            yield m.span()


# Digit-group shapes that are dates (01-02-2023, 2023/01/02 ...) or US ZIP+4 codes (02110-1301,
# in every GPL licence header), never phone numbers.
_DATE_SHAPES = frozenset({(2, 2, 4), (4, 2, 2)})
_ZIP4 = (5, 4)
_PHONE_SEP = re.compile(r"[ ./()-]+")


def _phone_ok(s: str) -> bool:
    n = len(_digits(s))
    groups = tuple(len(g) for g in _PHONE_SEP.split(s.lstrip("+(")) if g)
    if s.startswith("+"):
        # Written numbers are grouped; "+4294967296" and "+35236450.6" are arithmetic.
        return 8 <= n <= 15 and len(groups) >= 2 and groups[-1] >= 2
    if s.startswith("("):
        return 9 <= n <= 11
    if groups[:3] in _DATE_SHAPES or groups in (_ZIP4, (2, 2, 2)):
        return False
    if s.startswith("0"):
        return 9 <= n <= 11
    return n == 10  # 555-123-4567


def _phones(text: str) -> Iterator[tuple[int, int]]:
    for m in _PHONE.finditer(text):
        if _phone_ok(m.group()):
            yield m.span()


DETECTORS: dict[str, Callable[[str], Iterable[tuple[int, int]]]] = {
    "email": _emails,
    "ip": _ips,
    "iban": _ibans,
    "card": _cards,
    "national_id": _national_ids,
    "phone": _phones,
    "address": addresses,
    "name": names,
}


# --------------------------------------------------------------------------- find and mask
# Contact details: beside one of these a name is a private person's (names="private").
CONTACT_KINDS = ("email", "phone", "address")
NameRule = Literal["private", "any"]


class _Lines:
    """Line numbers of text offsets, by bisection over the newline positions (one pass over the text)."""

    def __init__(self, text: str) -> None:
        self.breaks = [m.start() for m in re.finditer("\n", text)]

    def of(self, pos: int) -> int:
        return bisect_left(self.breaks, pos)


def _contact_lines(text: str, at: _Lines, found: dict[str, list[tuple[int, int]]]) -> set[int]:
    """Line numbers holding an e-mail address, a phone number or a postal address.

    Found whether or not those kinds are masked: an e-mail beside a name marks a private person
    even where e-mails are kept.
    """
    lines: set[int] = set()
    has_digit = _DIGIT.search(text) is not None
    for kind in CONTACT_KINDS:
        if kind in found:
            spans: Iterable[tuple[int, int]] = found[kind]
        elif kind in NEEDS_DIGIT and not has_digit:
            continue
        else:
            spans = DETECTORS[kind](text)
        for start, end in spans:
            lines.update(range(at.of(start), at.of(end) + 1))
    return lines


def private_names(text: str, found: dict[str, list[tuple[int, int]]] | None = None) -> Iterator[tuple[int, int]]:
    """Names the text marks as a private person's: contact and signature blocks always (e-mail display
    names, changelog trailers, mail and patch header fields), a sign-off with contact details on its
    line or the next, any other evidence (honorific, credit, copyright holder, Author:, the given-name
    list) with contact details on its line or an adjacent one. A character of a novel, a figure of
    scripture or history or a credited author carries no contact details, so stays.

    found: the contact kinds' candidates already found by find_pii (the others are looked for here).
    """
    at: _Lines | None = None  # built at the first name that needs it
    lines: set[int] = set()
    for start, end, evidence in evidenced_names(text):
        if evidence == CONTACT:
            yield start, end
            continue
        if at is None:
            at = _Lines(text)
            lines = _contact_lines(text, at, found or {})
        first, last = at.of(start), at.of(end)
        near = range(first, last + 2) if evidence == SIGNOFF else range(first - 1, last + 2)
        if any(n in lines for n in near):
            yield start, end


def find_pii(text: str, kinds: Iterable[str] = PII_FIELDS, names: NameRule = "private") -> list[Span]:
    """Non-overlapping identifiers in text order; on overlap the kind earlier in PRIORITY wins.

    names: "private" replaces a name only where the text marks a private person (private_names),
    "any" on any evidence (pii_names.names).
    """
    wanted = set(kinds)
    has_digit = _DIGIT.search(text) is not None
    starts: list[int] = []  # accepted spans, kept sorted by start for the overlap test
    spans: list[Span] = []
    found: dict[str, list[tuple[int, int]]] = {}  # candidates of the contact kinds, reused by private_names
    for kind in PRIORITY:
        if kind not in wanted or (kind in NEEDS_DIGIT and not has_digit):
            continue
        if kind == "name":
            candidates: Iterable[tuple[int, int]] = private_names(text, found) if names == "private" else DETECTORS[kind](text)
        else:
            candidates = found[kind] = list(DETECTORS[kind](text))
        for start, end in candidates:
            i = bisect_left(starts, start)
            if i > 0 and spans[i - 1].end > start:
                continue
            if i < len(spans) and spans[i].start < end:
                continue
            starts.insert(i, start)
            spans.insert(i, Span(start, end, kind))
    return spans


def mask(text: str, spans: list[Span]) -> str:
    """The text with every span replaced by its kind's placeholder (spans sorted, disjoint)."""
    parts: list[str] = []
    pos = 0
    for s in spans:
        parts.append(text[pos : s.start])
        parts.append(PLACEHOLDERS[s.kind])
        pos = s.end
    parts.append(text[pos:])
    return "".join(parts)


def count_kinds(spans: list[Span]) -> dict[str, int]:
    counts = {k: 0 for k in PII_FIELDS}
    for s in spans:
        counts[s.kind] += 1
    return counts


class Pii(DocStep):
    """Masks identifiers with typed placeholders and stores their counts; removes nothing."""

    name = "pii"
    version = VERSION

    def enabled(self) -> bool:
        return bool(self.cfg.pii.kinds)

    def applies(self, doc: Doc) -> bool:
        return bool(doc.text)

    def process(self, doc: Doc) -> Rejection | None:
        assert doc.text is not None
        spans = find_pii(doc.text, self.cfg.pii.kinds, self.cfg.pii.names)
        doc.pii = count_kinds(spans)
        if spans:
            doc.text = mask(doc.text, spans)
        return None
