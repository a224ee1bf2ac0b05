"""The hand-written seccomp filter: its syscall numbers match the kernel headers where they are
installed, and its jumps all land inside the program."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from tokenmill.eval.sandbox_seccomp import DENIED, NUMBERS, RET, filter_program

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}


@pytest.mark.parametrize("machine", sorted(NUMBERS))
def test_numbers_match_the_kernel_headers(machine: str):
    header = HEADERS[machine]
    if not header.exists():
        pytest.skip(f"{header} is not installed")
    defined = {m[0]: int(m[1]) for m in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text())}
    assert set(DENIED) | {"clone", "clone3"} == set(NUMBERS[machine])
    wrong = {name: (nr, defined.get(name)) for name, nr in NUMBERS[machine].items() if defined.get(name) != nr}
    assert not wrong, wrong


@pytest.mark.parametrize("machine", sorted(NUMBERS))
def test_jumps_land_inside_and_the_program_ends_in_returns(machine: str):
    prog = filter_program(machine)
    entries = [struct.unpack("<HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    for i, (code, jt, jf, _k) in enumerate(entries):
        assert code == RET or i + 1 + max(jt, jf) < len(entries), i
    assert [code for code, *_ in entries[-4:]] == [RET] * 4
