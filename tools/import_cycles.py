"""Import cycles among tokenmill's modules, read from the source's AST (nothing is imported).

Every `import tokenmill.x` and `from tokenmill.x import y` counts, at module level and inside
functions alike (a function-level import hides a cycle from Python, not from a reader), and under
`if TYPE_CHECKING:` too; an edge is marked "lazy" when every import behind it sits inside a
function, "type only" when every one is under TYPE_CHECKING. `from pkg import name` is an
edge to pkg.name when that is a module, otherwise to pkg. Cycles are reported as the strongly
connected components of the graph, each with one shortest cycle through it.

    python tools/import_cycles.py [--top-level-only] [SRC_DIR]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from pathlib import Path


def module_names(src: Path) -> dict[str, Path]:
    """Dotted name → file, for every .py file under src/tokenmill."""
    out = {}
    for path in sorted((src / "tokenmill").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(node: ast.AST, here: str, is_pkg: bool, modules: dict[str, Path]) -> list[str]:
    """The tokenmill modules one import statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:  # relative: resolve against this module's package
        pkg = here.split(".") if is_pkg else here.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    out = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        out.append(full if full in modules else base)
    return [m for m in out if m in modules]


RANK = {"top": 2, "type only": 1, "lazy": 0}


def edges(modules: dict[str, Path]) -> dict[tuple[str, str], str]:
    """(importer, imported) → "top" when some import of it runs at module level, else "type only"
    (under TYPE_CHECKING) or "lazy" (inside a function)."""
    out: dict[tuple[str, str], str] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_pkg = path.name == "__init__.py"
        stack: list[tuple[ast.AST, str]] = [(tree, "top")]
        while stack:
            node, where = stack.pop()
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, name, is_pkg, modules):
                    if target != name and RANK[where] >= RANK[out.get((name, target), "lazy")]:
                        out[(name, target)] = where
            inner = where
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "lazy"
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and where == "top":
                stack.extend((child, "type only") for child in node.body)
                stack.extend((child, where) for child in node.orelse)
                continue
            stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return out


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop(); on.discard(x); comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w); on.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def shortest_cycle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest cycle inside one component (BFS from each member)."""
    members, best = set(comp), None
    for start in comp:
        prev, queue = {start: None}, deque([start])
        while queue:
            v = queue.popleft()
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    cyc = path[::-1] + [start]
                    if best is None or len(cyc) < len(best):
                        best = cyc
                    queue.clear(); break
                if w not in prev:
                    prev[w] = v; queue.append(w)
    assert best is not None
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", default=str(Path(__file__).resolve().parents[1] / "src"))
    ap.add_argument("--top-level-only", action="store_true",
                    help="only imports that run when the module loads (not in functions, not TYPE_CHECKING)")
    args = ap.parse_args()
    modules = module_names(Path(args.src))
    found = edges(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for (a, b), where in found.items():
        if where == "top" or not args.top_level_only:
            graph[a].add(b)
    comps = components(graph)
    for comp in comps:
        cyc = shortest_cycle(graph, comp)
        hops = [f"{a} -> {b}{'' if found[(a, b)] == 'top' else f' ({found[(a, b)]})'}" for a, b in zip(cyc, cyc[1:])]
        print(f"{len(comp)} modules: {', '.join(comp)}\n  e.g. " + "\n       ".join(hops))
    print(f"{len(comps)} cycle component(s) among {len(modules)} modules")
    return 1 if comps else 0


if __name__ == "__main__":
    sys.exit(main())
