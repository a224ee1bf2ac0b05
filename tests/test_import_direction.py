"""The source's imports follow the data path: no import circles in src/, and no stage imports a
stage that comes after it (data → tokenizer → tokens → mixture → model → train → eval → report)
except the edges listed here, each with the reason its import site gives. Read from the AST by
tools/import_cycles.py (nothing is imported), lazy and TYPE_CHECKING imports included."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from import_cycles import components, edges, module_names  # noqa: E402

ORDER = ("data", "tokenizer", "tokens", "mixture", "model", "train", "eval", "report")
ALLOWED_BACK_EDGES = {
    ("tokenmill.tokenizer.stage", "tokenmill.train.init_from"):
        "a continued model keeps its tokenizer, found through the parent checkpoint's format (train owns it)",
}


def stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ORDER else None


def graph() -> dict[tuple[str, str], str]:
    return edges(module_names(ROOT / "src"))


def test_there_is_no_import_circle_in_src():
    found = graph()
    adjacency: dict[str, set[str]] = {}
    for a, b in found:
        adjacency.setdefault(a, set()).add(b)
        adjacency.setdefault(b, set())
    assert components(adjacency) == []


def test_no_stage_imports_a_later_stage_except_where_its_comment_says_why():
    back = {(a, b) for (a, b) in graph() if stage(a) and stage(b) and ORDER.index(stage(b)) > ORDER.index(stage(a))}
    assert back == set(ALLOWED_BACK_EDGES), f"imports running back up the data path: {sorted(back - set(ALLOWED_BACK_EDGES))}"
    for importer, imported in back:
        path = ROOT / "src" / (importer.replace(".", "/") + ".py")
        lines = path.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if f"from {imported} import" in line or f"import {imported}" in line)
        assert any(line.strip().startswith("#") for line in lines[max(0, at - 4):at]), f"{path}: say why {imported} is imported"


def test_a_back_edge_is_caught(tmp_path: Path):
    src = tmp_path / "src" / "tokenmill"
    for pkg in ("data", "report"):
        (src / pkg).mkdir(parents=True)
        (src / pkg / "__init__.py").write_text("")
    (src / "__init__.py").write_text("")
    (src / "data" / "x.py").write_text("def f():\n    from tokenmill.report import y\n")
    (src / "report" / "y.py").write_text("")
    found = edges(module_names(tmp_path / "src"))
    assert found[("tokenmill.data.x", "tokenmill.report.y")] == "lazy"
