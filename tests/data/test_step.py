from pathlib import Path

import pytest

from tokenmill.config import CurateConfig
from tokenmill.data.document import Doc, Rejection
from tokenmill.data.step import DocStep


class Upper(DocStep):
    name = "normalize"
    version = "t1"

    def process(self, doc: Doc) -> Rejection | None:
        doc.text = doc.text.upper()
        return None


def test_defaults_and_path_resolution(tmp_path):
    step = Upper(CurateConfig(), tmp_path)
    assert step.enabled() and step.resolve("lists/a.txt") == tmp_path / "lists/a.txt"
    assert step.resolve("/abs/x") == Path("/abs/x")
    doc = Doc(id="1", text="abc", source="s", url="u", bucket="web", license="l", format="text")
    assert step.applies(doc) and step.process(doc) is None and doc.text == "ABC"


def test_process_is_abstract():
    class Missing(DocStep):
        name, version = "url", "0"

    with pytest.raises(TypeError):
        Missing(CurateConfig())
