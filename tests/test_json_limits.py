"""The depth-limited JSON parser: deep texts are refused before the recursive parser sees them."""

from __future__ import annotations

import json

import pytest

from tokenmill import json_limits


def test_depth_ignores_brackets_inside_strings():
    assert json_limits.nesting_depth('{"a": [1, {"b": "[[[[\\" ["}]}') == 3
    assert json_limits.nesting_depth("[]") == 1
    assert json_limits.nesting_depth('"no brackets"') == 0


@pytest.mark.parametrize("depth", [201, 2_000, 100_000])
def test_a_deep_text_is_refused_with_its_depth_not_a_recursion_error(depth: int):
    text = "[" * depth + "]" * depth
    with pytest.raises(json_limits.TooDeep) as err:
        json_limits.loads(text)
    assert err.value.depth == depth and "200" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_at_the_limit_parses_and_many_shallow_brackets_are_fine():
    assert json_limits.loads("[" * 200 + "]" * 200) is not None
    wide = json.dumps([[i] for i in range(10_000)])
    assert json_limits.loads(wide) == [[i] for i in range(10_000)]
    assert json_limits.loads(wide.encode()) == [[i] for i in range(10_000)]


def test_bad_json_is_still_a_decode_error():
    with pytest.raises(json.JSONDecodeError):
        json_limits.loads("{")


def test_a_file_too_deep_not_json_or_not_utf8_is_one_line_naming_it(tmp_path):
    """load_file: the user-facing form, one line naming the file (a UserError and a ValueError)."""
    from tokenmill.errors import UserError

    path = tmp_path / "state.json"
    path.write_text('{"ok": [1, {"a": null}]}')
    assert json_limits.load_file(path) == {"ok": [1, {"a": None}]}
    for content, message in [
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 200 levels"),
        ('{"a": ', "not valid JSON (Expecting value at line 1 column 7)"),
        (b"\xff{}", "not UTF-8 text (invalid start byte at byte 0)"),
    ]:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(json_limits.BadJSONFile) as e:
            json_limits.load_file(path)
        assert str(e.value) == f"{path}: {message}" and isinstance(e.value, (UserError, ValueError))
    with pytest.raises(ValueError, match=r"state\.json: not UTF-8"):  # a caller's own error class
        json_limits.load_file(path, ValueError)
