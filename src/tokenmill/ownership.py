"""Ownership of output: tokenmill writes only into a directory that is new, empty, or one it made
before, and there it replaces only what it wrote itself.

A directory tokenmill writes into holds a `.tokenmill` marker (JSON: the stage and run that made it,
and the top-level names it wrote there). A directory that is not empty and has no marker (and is not
recognised as an earlier tokenmill version's output) is refused before any work starts. Replacing
an output is a rename of a temporary that tokenmill created under a unique name; the only paths
ever deleted are those the marker lists or temporaries tokenmill named itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable

from pydantic import AfterValidator

from tokenmill import json_limits
from tokenmill.errors import UserError

MARKER = ".tokenmill"
TEMPORARY = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}(\.[a-z]+)?$")


class OwnershipError(UserError, ValueError):
    """An output path holds something tokenmill did not write; nothing was written or deleted."""


def one_folder_name(name: str) -> str:
    """A config's `name` becomes <root>/<name>: a separator, `..` or an absolute name would put
    the directory outside `root`."""
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name or Path(name).is_absolute():
        raise ValueError(
            f"{name!r} must be one folder name (no '/', '\\', '..' or absolute path): the "
            "directory is <root>/<name>; use `root` to put it elsewhere"
        )
    return name


FolderName = Annotated[str, AfterValidator(one_folder_name)]


def temporary_name(path: Path, suffix: str = "") -> Path:
    """A name beside `path` no other writer uses (process and a random part): two writers of the
    same file (a task re-run while a cut-off node still runs it) never interleave in one file."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}")


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The marker of a directory tokenmill made, or None (no marker, or not one of tokenmill's)."""
    try:
        record = json_limits.load_file((Path(directory) / MARKER))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("tool") == "tokenmill" else None


def write_marker(directory: Path, stage: str, run: str | None = None, outputs: Iterable[str] | None = None) -> dict[str, Any]:
    """Record (atomically) that tokenmill's `stage` owns `directory` and wrote `outputs` there."""
    previous = read_marker(directory) or {}
    record = {
        "tool": "tokenmill",
        "stage": stage,
        "run": run if run is not None else previous.get("run"),
        "created_at": previous.get("created_at", round(time.time(), 3)),
        "updated_at": round(time.time(), 3),
        "outputs": sorted(set(outputs if outputs is not None else previous.get("outputs", [])) - {MARKER}),
    }
    path = Path(directory) / MARKER
    tmp = temporary_name(path)
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return record


def claim_dir(
    directory: Path,
    stage: str,
    *,
    run: str | None = None,
    legacy: Callable[[Path], bool] | None = None,
    hint: str = "",
    create: bool = True,
) -> dict[str, Any]:
    """Make `directory` the output of `stage`, or refuse (before any work) with one line.

    Accepted: a new path (created), an empty directory, one whose marker names `stage`, and one
    that `legacy` recognises as an earlier tokenmill version's output. Nothing else, whatever the
    caller's flags: a folder of someone else's files is never written into (a user's `_funnel.json`
    and `web/part-00000.parquet` look just like curate output, so a `legacy` test must rest on
    something the user cannot have made by chance, such as a marked parent). Returns the marker,
    with `adopted` set when the directory had none; with create=False a new path is left for the
    caller to create whole (the returned marker is then not written)."""
    d = Path(directory)
    if os.path.lexists(d) and not d.is_dir():
        raise OwnershipError(
            f"{d}: exists and is not a directory; tokenmill writes its {stage} output only "
            "into a new, empty or tokenmill-made directory"
        )
    mark = read_marker(d) if d.is_dir() else None
    if mark is not None:
        if mark.get("stage") != stage:
            raise OwnershipError(
                f"{d}: holds tokenmill's {mark.get('stage')} output ({MARKER}), not {stage} output; choose another directory"
            )
        return mark
    if not create and not os.path.lexists(d):
        return {"tool": "tokenmill", "stage": stage, "run": run, "outputs": []}
    d.mkdir(parents=True, exist_ok=True)
    # a temporary is another tokenmill process claiming the same directory (ranks of one torchrun job)
    empty = not any(e.name != MARKER and not TEMPORARY.match(e.name) for e in d.iterdir())
    if not (empty or (legacy is not None and legacy(d))):
        raise OwnershipError(
            f"{d}: not empty and not made by tokenmill (no {MARKER} marker); tokenmill writes "
            f"its {stage} output only into a new, empty or tokenmill-made directory{hint}"
        )
    return {**write_marker(d, stage, run, outputs=[]), "adopted": not empty}


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def check_clashes(out: Path, names: Iterable[str], owned: Iterable[str]) -> None:
    """Refuse when a name tokenmill is about to write in `out` is taken by something it did not write."""
    owned = set(owned)
    for name in sorted(set(names)):
        if name not in owned and os.path.lexists(Path(out) / name):
            raise OwnershipError(
                f"{Path(out) / name}: exists and was not written by tokenmill; "
                "refusing to replace it (move it away or choose another directory)"
            )


def publish_entries(staged: Path, out: Path, owned: Iterable[str]) -> list[str]:
    """Move every entry of `staged` (a directory tokenmill made) into `out`, replacing only the
    entries named in `owned` (what tokenmill wrote there before; ones the new output lacks go too).
    Each old entry is first renamed to a temporary name and deleted only after the new one is in
    place. Returns the names now in `out` that are tokenmill's."""
    staged, out = Path(staged), Path(out)
    new = sorted(p.name for p in staged.iterdir() if p.name != MARKER)
    owned = set(owned) - {MARKER}
    check_clashes(out, new, owned)
    aside = []
    for name in sorted(owned):
        if os.path.lexists(out / name):
            tmp = temporary_name(out / name)
            os.replace(out / name, tmp)
            aside.append(tmp)
    for name in new:
        os.replace(staged / name, out / name)
    for tmp in aside:
        _remove(tmp)
    return new


def publish_into(staged: Path, out: Path, stage: str, owned: Iterable[str]) -> list[str]:
    """publish_entries, with the marker naming the new entries before they move: a kill midway
    leaves nothing that tokenmill would later take for someone else's file."""
    new = {p.name for p in Path(staged).iterdir()} - {MARKER}
    check_clashes(out, new, owned)
    write_marker(out, stage, outputs=set(owned) | new)
    return write_marker(out, stage, outputs=publish_entries(staged, out, set(owned) | new))["outputs"]


def remove_own_temporaries(directory: Path) -> None:
    """Delete the top-level temporaries a killed publish left in `directory` (names only tokenmill makes)."""
    for entry in Path(directory).iterdir():
        if TEMPORARY.match(entry.name):
            _remove(entry)
