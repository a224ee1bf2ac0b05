"""benchmarks/record.py: its options before "--", the script after it, in the order its docstring gives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from record import parse  # noqa: E402


def test_result_after_out_is_record_py_s_and_the_script_keeps_its_own_flags():
    args, script = parse(["out.json", "--result", "/tmp/r.json", "--", "bench.py", "--json", "/tmp/r.json", "--", "x"])
    assert (args.out, args.result) == (Path("out.json"), Path("/tmp/r.json"))
    assert script == ["bench.py", "--json", "/tmp/r.json", "--", "x"]
    args, script = parse(["--result", "r.json", "out.json", "--", "bench.py"])
    assert (args.out, args.result, script) == (Path("out.json"), Path("r.json"), ["bench.py"])
    args, script = parse(["out.json", "--", "bench.py", "--result", "mine"])
    assert args.result is None and script == ["bench.py", "--result", "mine"]


@pytest.mark.parametrize("argv", [["out.json"], ["out.json", "--"]])
def test_no_script_is_an_error(argv):
    with pytest.raises(SystemExit):
        parse(argv)
