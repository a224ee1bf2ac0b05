"""PII: checksums against their defining properties, masking on a labelled file of real text equal
to the labels, no false positives on the number shapes of code and docs, the step contract."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.document import PII_FIELDS, Doc
from tokenmill.data.steps.pii import (IBAN_LENGTHS, PLACEHOLDERS, Pii, find_pii, iban_valid, luhn_valid, mask)

LABELLED = [json.loads(line) for line in
            (Path(__file__).parents[1] / "fixtures" / "pii_labelled.jsonl").read_text(encoding="utf-8").splitlines()]

# Published test / example numbers.
CARDS = ["4242424242424242", "4111111111111111", "5555555555554444", "378282246310005", "6011111111111117",
         "3530111333300000", "30569309025904", "2223003122003222"]
IBANS = ["GB82WEST12345698765432", "DE89370400440532013000", "FR1420041010050500013M02606",
         "NL91ABNA0417164300", "BE68539007547034", "CH9300762011623852957", "NO9386011117947",
         "IT60X0542811101000000123456", "ES9121000418450200051332"]


def _luhn_check_digit(payload: str) -> str:
    """The digit that completes a Luhn number, computed from the definition (doubling from the right)."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch) * (2 if i % 2 == 0 else 1)  # the check digit will sit at position 0
        total += d // 10 + d % 10
    return str((10 - total % 10) % 10)


def test_luhn_matches_its_definition_and_catches_single_errors():
    rng = random.Random(0)
    assert all(luhn_valid(c) for c in CARDS)
    for _ in range(300):
        payload = "".join(rng.choice("0123456789") for _ in range(rng.randint(12, 18)))
        number = payload + _luhn_check_digit(payload)
        assert luhn_valid(number)
        i = rng.randrange(len(number))
        wrong = number[:i] + str((int(number[i]) + rng.randint(1, 9)) % 10) + number[i + 1:]
        assert not luhn_valid(wrong)  # Luhn detects every single-digit substitution


def _iban_check_digits(country: str, bban: str) -> str:
    """ISO 7064 MOD 97-10 check digits from the definition: 98 - (BBAN + country + '00') mod 97."""
    digits = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{98 - int(digits) % 97:02d}"


def test_iban_check_digits_match_the_registry_examples_and_errors_are_caught():
    rng = random.Random(1)
    for iban in IBANS:
        assert iban_valid(iban) and iban_valid(" ".join(iban[i:i + 4] for i in range(0, len(iban), 4)))
        assert _iban_check_digits(iban[:2], iban[4:]) == iban[2:4]
        i = rng.randrange(4, len(iban))
        alphabet = "0123456789" if iban[i].isdigit() else "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        wrong = iban[:i] + rng.choice([c for c in alphabet if c != iban[i]]) + iban[i + 1:]
        assert not iban_valid(wrong)  # mod 97 detects every single-character substitution
    assert not iban_valid("GB82WEST1234569876543")  # wrong length for GB
    assert not iban_valid("XX82WEST12345698765432")  # no such country
    assert IBAN_LENGTHS["DE"] == 22 and IBAN_LENGTHS["NO"] == 15


# The pattern kinds are found exactly; names and addresses (also labelled in the file, one name
# missed) are tested in test_pii_names.py.
PATTERN_KINDS = ["email", "phone", "ip", "card", "iban", "national_id"]


def _gold(rec: dict) -> list[tuple[int, int, str]]:
    return [(s["start"], s["end"], s["kind"]) for s in rec["pii"] if s["kind"] in PATTERN_KINDS]


def test_labelled_file_found_exactly():
    for rec in LABELLED:
        found = [(s.start, s.end, s.kind) for s in find_pii(rec["text"], PATTERN_KINDS)]
        assert found == _gold(rec), rec["source"]


def test_step_counts_equal_labels_and_text_outside_pii_is_untouched():
    step = Pii(CurateConfig(pii={"kinds": PATTERN_KINDS}))
    assert step.name == "pii" and step.enabled()
    for rec in LABELLED:
        doc = Doc(id="d", text=rec["text"], source="s", url="u", bucket=rec["bucket"], license="l", format="text")
        assert step.process(doc) is None  # PII is masked, never a reason to remove a document
        want = {k: sum(1 for s in rec["pii"] if s["kind"] == k and k in PATTERN_KINDS) for k in PII_FIELDS}
        assert doc.pii == want, rec["source"]
        for kind, placeholder in PLACEHOLDERS.items():
            assert doc.text.count(placeholder) == want[kind]
        # Removing the placeholders from the masked text = removing the labelled spans from the original.
        kept, pos = [], 0
        for start, end, _ in _gold(rec):
            kept.append(rec["text"][pos:start])
            pos = end
        kept.append(rec["text"][pos:])
        assert re.sub("|".join(map(re.escape, PLACEHOLDERS.values())), "", doc.text) == "".join(kept)
        assert find_pii(doc.text, PATTERN_KINDS) == []  # masking is idempotent


@pytest.mark.parametrize("text", [
    "Python 3.11.2 (main, Mar 13 2023, 12:18:29) [GCC 12.2.0] on linux, version 2.0.0.1",
    "IronPython 1.0 (1.0.61005.1977) on .NET 2.0.50727.42",
    "released 2023-01-15, see 01/02/2023 and 15.01.2023; 10:30:00 UTC",
    "uuid 12345678-1234-5678-1234-567812345678 and 0x12345678123456781234567812345678",
    "chmod 0755 file; umask 0022; perms 0644 0755 0600",
    "ISBN 0-306-40615-2 and 978-3-16-148410-0; ISSN 0317-8471",
    "Foundation, Inc., 51 Franklin Street, Fifth Floor, Boston, MA 02110-1301 USA",
    "as defined by IEEE 802.11 7.3.2.2 but without the length; section 9.4.2.251",
    "Code: 44 24 04 e8 6f 05 00 00 e9 e8 fe ff ff 8d 76 00 8d bc 27 00 00 83 3c 01 00 00 89 44 24 14",
    "542A 542B 542C 542D 542E 542F 5430 5431 5432 5433 5440 5441",
    "540E 540F 5410 5411 5412 5413\n5414 5415 5416 5417 20BBF 20BC6 56DD 56DE",  # Perl Unicode::Collate
    "y = x@self.weight.T; @property; a@b.c; std::vector<int> v; Foo::Bar::baz()",
    "local 127.0.0.1, 10.0.0.1, 192.168.1.1, ::1, fe80::1, docs 192.0.2.1 and 2001:db8::1",
    "x = 4294967296 + 281474976710656; y = +4294967296; z = +35236450.6",
    "timestamps 1700000000000000000 and 1234567890123456 and 9999999999999999",
    "SSN-like but never issued: 000-12-3456 666-12-3456 912-34-5678 123-00-4567 123-45-0000",
    "HMRC's example QQ 12 34 56 C is not a valid National Insurance number",
    "7-digit local 962-7873 and undelimited 5551234567 are left alone",
])
def test_no_false_positives_on_code_and_number_shapes(text):
    assert find_pii(text) == [], [text[s.start:s.end] for s in find_pii(text)]


@pytest.mark.parametrize("text, kind", [
    ("mail me at jane.doe+lists@mail.example.co.uk.", "email"),
    ("E<lt>kane@cpan.orgE<gt>", "email"),
    ("server at 8.8.8.8 answered", "ip"),
    ("v6 2001:4860:4860::8888 answered", "ip"),
    ("card 4111-1111-1111-1111 expires", "card"),
    ("Amex 3782 822463 10005.", "card"),
    ("IBAN DE89 3704 0044 0532 0130 00 BANK", "iban"),
    ("SSN 078-05-1120.", "national_id"),
    ("NINO AB 12 34 56 C", "national_id"),
    ("call +1 (555) 123-4567 now", "phone"),
    ("ruf 0171/1234567 an", "phone"),
    ("appelez le 01 23 45 67 89", "phone"),
])
def test_each_kind_found(text, kind):
    assert [s.kind for s in find_pii(text)] == [kind]


def test_overlap_goes_to_the_earlier_kind_and_kinds_can_be_switched_off():
    text = "write to 555-123-4567@example.com or call 555-123-4567"
    spans = find_pii(text)
    assert [(text[s.start:s.end], s.kind) for s in spans] == [
        ("555-123-4567@example.com", "email"), ("555-123-4567", "phone")]
    assert [s.kind for s in find_pii(text, ["phone"])] == ["phone", "phone"]
    assert mask(text, spans) == "write to <EMAIL> or call <PHONE>"
    assert not Pii(CurateConfig(pii={"kinds": []})).enabled()
