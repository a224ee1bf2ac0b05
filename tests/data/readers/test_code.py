"""Code files: their language recorded."""

from __future__ import annotations

import json

from tokenmill.data.sources import read_source
from tests.data.readers.helpers import files_source


def test_code_records_carry_language(tmp_path):
    (tmp_path / "m.py").write_text("print(1)\n")
    (tmp_path / "lib.rs").write_text("fn main() {}\n")
    (tmp_path / "README").write_text("read me\n")
    records = {r.locator: r for r in read_source(files_source(tmp_path, bucket="code"), 100)}
    assert json.loads(records["m.py"].metadata) == {"language": "python"}
    assert json.loads(records["lib.rs"].metadata) == {"language": "rust"}
    assert records["README"].format == "text" and records["README"].metadata is None
