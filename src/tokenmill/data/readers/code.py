"""Source code: one document per file, its language recorded ({"language": "python"})."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from tokenmill.data.document import RawRecord
from tokenmill.data.readers.base import Reader, RecordMaker, json_meta, register
from tokenmill.data.readers.text import read_whole

# Extension -> language recorded on code documents (names as GitHub linguist spells them, lower case).
CODE_LANGUAGES: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".cu": "cuda",
    ".rs": "rust",
    ".go": "go",
    ".java": "java",
    ".kt": "kotlin",
    ".scala": "scala",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".jsx": "javascript",
    ".rb": "ruby",
    ".php": "php",
    ".pl": "perl",
    ".pm": "perl",
    ".lua": "lua",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".sql": "sql",
    ".swift": "swift",
    ".cs": "c#",
    ".m": "objective-c",
    ".jl": "julia",
    ".hs": "haskell",
    ".ml": "ocaml",
    ".r": "r",
    ".zig": "zig",
    ".nim": "nim",
}
CODE_EXTS = frozenset(CODE_LANGUAGES)
CODE_TREE_SAMPLE = 10_000  # files looked at to call an input a code tree
CODE_TREE_SHARE = 0.5


def code_language(path: Path) -> str | None:
    return CODE_LANGUAGES.get(path.suffix.lower())


def is_code_tree(files: list[Path]) -> bool:
    """Mostly files with a code extension (by count, over the first CODE_TREE_SAMPLE in order)."""
    sample = files[:CODE_TREE_SAMPLE]
    n_code = sum(1 for f in sample if f.suffix.lower() in CODE_EXTS)
    return bool(sample) and n_code > CODE_TREE_SHARE * len(sample)


def read_code(make: RecordMaker, path: Path, locator: str, max_doc_bytes: int) -> RawRecord:
    return read_whole(make, path, locator, "code", max_doc_bytes, json_meta({"language": code_language(path)}))


@register
class CodeReader(Reader):
    name = "code"
    extensions = CODE_EXTS

    def read(self, make: RecordMaker, path: Path, rel: str, max_doc_bytes: int) -> Iterator[RawRecord]:
        yield read_code(make, path, rel, max_doc_bytes)
