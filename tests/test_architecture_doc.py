"""docs/architecture.md names every package folder and every data/ module, so the map a newcomer
reads cannot silently fall behind the tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tokenmill"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_package_folder_is_on_the_map():
    folders = sorted(p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert folders and [f for f in folders if f"`{f}/`" not in DOC] == []


# data/'s subfolders whose modules the map names one by one (readers/ and dedup/ are described by
# what they hold; their own __init__ docstrings list their modules).
NAMED_SUBFOLDERS = ("steps", "classifiers")


def test_every_data_module_and_subfolder_is_on_the_map():
    data = SRC / "data"
    subfolders = sorted(p.name for p in data.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    modules = [p.name for p in data.glob("*.py")] + [p.name for sub in NAMED_SUBFOLDERS for p in (data / sub).glob("*.py")]
    modules = sorted(m for m in modules if m != "__init__.py")
    missing = [m for m in modules if f"`{m}`" not in DOC and f"`{m[:-3]}" not in DOC] + \
              [s for s in subfolders if f"`{s}/`" not in DOC]
    assert set(NAMED_SUBFOLDERS) <= set(subfolders) and len(modules) > 30
    assert missing == [], f"docs/architecture.md does not place: {missing}"
