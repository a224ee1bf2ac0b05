"""What a JSON object or a Parquet row holds: its text field, url, id, source and metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenmill.data.document import Encoding, RawRecord
from tokenmill.data.readers.base import RecordMaker, is_encodable, json_meta


@dataclass(slots=True)
class Fields:
    """What a JSON object or Parquet row holds: its text, or the problem."""

    text: str | None
    url: str | None = None
    record_id: str | None = None
    metadata: str | None = None
    problem: str | None = None


def record_fields(obj: Any, field: str) -> Fields:
    if not isinstance(obj, dict):
        return Fields(None, problem=f"record is a JSON {type(obj).__name__}, not an object")
    rid = obj.get("id")
    rid = str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) and str(rid) else None
    text = obj.get(field)
    if not isinstance(text, str):  # quarantined under its own id, so its owner finds it by that id
        got = "missing" if text is None else f"a {type(text).__name__}"
        return Fields(None, record_id=rid, problem=f"text field {field!r} is {got}")
    url = obj.get("url")
    meta = json_meta({"id": obj.get("id"), "source": obj.get("source"), "metadata": obj.get("metadata")})
    return Fields(text, url if isinstance(url, str) and url else None, rid, meta)


def record_locator(rel: str, position: str, record_id: str | None) -> str:
    """`rel#id=ID` when the record has an id (stable when lines move), else `rel` + position.
    The file stays in the locator: ids like 0, 1, 2 … restart in every file of a dataset."""
    return f"{rel}#id={record_id}" if record_id is not None else f"{rel}{position}"


def fields_record(
    make: RecordMaker,
    rel: str,
    position: str,
    where: str,
    what: str,
    n: int,
    fields: Fields,
    value: Any,
    encoding: Encoding | None = None,
) -> RawRecord:
    """The record of one parsed JSON object / Parquet row (`encoding`: of the bytes it was parsed from)."""
    locator = record_locator(rel, position, fields.record_id)
    if fields.text is None:
        record = make.bad(locator, where, "text", n, "missing_field", value, f"{what}: {fields.problem}")
    elif not is_encodable(fields.text):
        record = make.bad(locator, where, "text", n, "undecodable", value, f"{what}: text holds lone surrogates", fields.metadata)
    else:
        record = make.text(locator, fields.url or where, "text", fields.text, n, what, fields.metadata, encoding)
    record.record_id = fields.record_id
    return record
