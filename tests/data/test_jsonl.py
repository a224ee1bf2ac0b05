import pytest

from tokenmill.data.jsonl import json_objects


class Bad(ValueError):
    pass


def test_objects_with_line_numbers_and_blank_lines_skipped(tmp_path):
    lines = ['{"a": 1}\n', "\n", '{"b": 2}\n']
    assert list(json_objects(lines, tmp_path / "f.jsonl", Bad)) == [(1, {"a": 1}), (3, {"b": 2})]


@pytest.mark.parametrize("line, problem", [("{nope", "not valid JSON"), ("[1, 2]", "expected a JSON object, got list")])
def test_bad_line_names_file_and_line(tmp_path, line, problem):
    with pytest.raises(Bad, match=rf"f\.jsonl:2: {problem}"):
        list(json_objects(['{"ok": true}', line], tmp_path / "f.jsonl", Bad))
