"""datatrove's FineWeb recipe as a peer (benchmarks/peer_datatrove.py): a few inline texts, no
corpora, no download (issue 55)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("datatrove")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import peer_datatrove as peer  # noqa: E402

EN = ("The history of the town goes back to the twelfth century, when a small group of farmers settled on the banks "
      "of the river. Over the following years they built a mill, a church and a market hall, and the settlement grew "
      "into a busy place of trade. Merchants came from the neighbouring valleys to sell wool and grain.\n\n"
      "In the sixteenth century the town suffered from a great fire that destroyed most of the wooden houses. The "
      "citizens rebuilt it in stone, and many of those buildings can still be seen today. The old market hall was "
      "restored in the nineteenth century and is now a museum that tells the story of the region.\n\n"
      "Today the town is known for its festivals, its quiet streets and the walks along the river. Visitors who come "
      "in the summer can take a boat to the old mill and have lunch in one of the small restaurants by the water.")
DE = ("Die Geschichte der Stadt reicht bis ins zwölfte Jahrhundert zurück, als sich eine kleine Gruppe von Bauern am "
      "Ufer des Flusses niederließ. In den folgenden Jahren bauten sie eine Mühle, eine Kirche und eine Markthalle, und "
      "die Siedlung wuchs zu einem belebten Handelsort heran.\n\nIm sechzehnten Jahrhundert wurde die Stadt von einem "
      "großen Brand heimgesucht, der die meisten Holzhäuser zerstörte. Die Bürger bauten sie aus Stein wieder auf, und "
      "viele dieser Gebäude sind noch heute zu sehen.\n\nHeute ist die Stadt für ihre Feste und ihre ruhigen Straßen "
      "bekannt. Besucher können im Sommer mit dem Boot zur alten Mühle fahren und am Wasser zu Mittag essen.")
MOJIBAKE = EN.replace("neighbouring valleys", "neighbouring café’s valleys").encode("utf-8").decode("cp1252")
LINKS = "\n".join(f"Home | About us | Contact | Privacy | Terms | Next page {i}" for i in range(60))


@pytest.fixture(scope="module")
def outcomes() -> dict:
    docs = [{"id": "en", "text": EN}, {"id": "moji", "text": MOJIBAKE}, {"id": "de", "text": DE}, {"id": "links", "text": LINKS}]
    return peer.fineweb_recipe(docs, "text", languages=("en",))


def test_english_paragraph_kept(outcomes) -> None:
    assert outcomes["en"]["outcome"] == "kept"
    # C4QualityFilter rebuilds the text from its kept lines: the blank lines go, the words stay
    assert outcomes["en"]["text"].split() == EN.split()


def test_mojibake_repaired_by_ftfy(outcomes) -> None:
    assert "cafÃ©" in MOJIBAKE
    assert outcomes["moji"]["outcome"] == "kept"
    assert "café’s" in outcomes["moji"]["text"] and "Ã" not in outcomes["moji"]["text"]


def test_german_removed_by_language_filter(outcomes) -> None:
    assert outcomes["de"]["outcome"] == "LanguageFilter:detected_de"
    assert peer.fineweb_recipe([{"id": "de", "text": DE}], languages=("en", "de"))["de"]["outcome"] == "kept"


def test_link_list_removed(outcomes) -> None:
    assert outcomes["links"]["outcome"] != "kept"


def test_no_download(monkeypatch) -> None:
    import datatrove.utils.lid as lid
    from datatrove.data import Document
    from tokenmill.data.steps.langid import model_path

    def refuse(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(lid, "cached_asset_path_or_download", refuse)
    lf = peer.language_filter(("en",))
    assert isinstance(lf.model, peer.LocalFT176)
    assert peer.lid_model_path() == str(model_path()) and Path(peer.lid_model_path()).is_file()
    assert lf.model.predict(Document(text=EN, id="x"))[0][0] == "en"
