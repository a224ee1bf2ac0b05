"""URL domain filter: block lists and allow lists of domains (coarse filtering
based on site and source: avoid obviously high-risk sources first; RefinedWeb, Penedo et al. 2023).

Every document whose URL names a host gets `doc.domain`: the host lowercased, without port,
trailing dot or a leading "www.". Local files (paths, "path:line") have no domain. The step
always runs, even with no list configured, because bucket rules and the report read the
domain; with no list it removes nothing.

Lists are text files, one domain per line; "#" starts a comment; hosts-file lines
("0.0.0.0 ads.example.com") and URLs are accepted and reduced to their domain. An entry matches
the domain itself and every subdomain ("example.com" matches "a.b.example.com", not
"notexample.com"): the domain's suffixes at label boundaries are looked up in a set, so a
lookup costs one probe per label whatever the list's size.

Rules: "blocked_domain" (the domain or a parent is blocked; the value is the matching entry),
then "not_allowed" (allow lists are given and neither the domain nor a parent is on them).
Documents without a domain pass: the lists speak about web hosts only.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from tokenmill.data.document import Doc, Rejection
from tokenmill.data.step import DocStep

VERSION = "1"


def domain_of(url: str | None) -> str | None:
    """Host of a URL ("https://WWW.Example.com:8080/x" -> "example.com"); None for paths."""
    if not url:
        return None
    url = url.strip()
    if "://" not in url and not url.startswith("//"):
        if not url.lower().startswith("www."):
            return None  # a file path or "path:line", not a URL
        url = "//" + url
    try:
        host = urlsplit(url).hostname  # lowercased; userinfo, port and IPv6 brackets removed
    except ValueError:  # e.g. an unbalanced "[" in the netloc
        return None
    if not host:
        return None  # file:///path
    host = host.rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    return host or None


def parent_domains(domain: str) -> list[str]:
    """The domain and its parents at label boundaries: a.b.com -> [a.b.com, b.com, com].
    An IP address is one unit, never split at its dots."""
    if _is_ip(domain):
        return [domain]
    labels = domain.split(".")
    return [".".join(labels[i:]) for i in range(len(labels))]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _entry(line: str) -> str | None:
    """One list line -> its domain: comments and blanks skipped, hosts-file lines reduced."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    fields = line.split()
    if len(fields) >= 2 and _is_ip(fields[0]):  # "0.0.0.0 ads.example.com"
        line = fields[1]
    line = line.lower().lstrip("*").lstrip(".")  # "*.example.com", ".example.com"
    return domain_of(line if "://" in line else "//" + line)


def read_domain_list(path: Path) -> frozenset[str]:
    """The domains of a list file; a missing file is a clear error naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: domain list not found")
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(d for d in map(_entry, text.splitlines()) if d)


def match(domain: str, entries: frozenset[str]) -> str | None:
    """The list entry that covers the domain (itself or a parent), or None."""
    for candidate in parent_domains(domain):
        if candidate in entries:
            return candidate
    return None


class UrlFilter(DocStep):
    """Fills doc.domain; removes documents of blocked domains, or outside the allow lists."""

    name = "url"
    version = VERSION

    def prepare(self, work_dir: Path) -> None:
        self.setup(work_dir)  # a missing or unreadable list fails in the driver, before any work

    def setup(self, work_dir: Path) -> None:
        cfg = self.cfg.url
        self._block = frozenset().union(*(read_domain_list(self.resolve(p)) for p in cfg.block_lists))
        self._allow = frozenset().union(*(read_domain_list(self.resolve(p)) for p in cfg.allow_lists))
        self._allow_on = bool(cfg.allow_lists)

    def enabled(self) -> bool:
        return True  # fills doc.domain for the bucket rules even when no list is configured

    def process(self, doc: Doc) -> Rejection | None:
        doc.domain = domain_of(doc.url)
        if doc.domain is None:
            return None
        blocked = match(doc.domain, self._block)
        if blocked is not None:
            return Rejection(self.name, "blocked_domain", blocked, f"domain {doc.domain} is blocked by the list entry {blocked}")
        if self._allow_on and match(doc.domain, self._allow) is None:
            return Rejection(self.name, "not_allowed", doc.domain, f"domain {doc.domain} is not on the allow lists")
        return None
