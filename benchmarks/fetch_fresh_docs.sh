#!/usr/bin/env bash
# fetch_fresh_docs.sh -- documentation collections that no tokenmill design has read, for the
# held-out judgement of benchmarks/frozen/docs_kept_fresh.json (issue 55).
#
# Usage:  bash benchmarks/fetch_fresh_docs.sh [TARGET_DIR]      (default ../fresh_corpora)
#
# Registries only: six Debian bookworm packages at pinned versions, fetched with
# `apt-get download` and unpacked with `dpkg-deb -x` (no maintainer script runs, nothing is
# installed). Only regular .html files are copied: a symlink (apache2-doc links every page a
# language has not translated to its English page) is left out, so a language folder holds only
# its own translations. TARGET_DIR/FILES.tsv lists every file with its sha256; the scorer checks
# the set's digest against the frozen one. About 40 MB, under a minute.
set -euo pipefail

OUT=$(readlink -m "${1:-../fresh_corpora}")
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT

# package=version  source folder inside the package  -> collection (under web_html/)  name filter
PACKAGES=(
  "apache2-doc=2.4.71-1~deb12u1|usr/share/doc/apache2-doc/manual|apache2-doc|*.html"
  "postgresql-doc-15=15.20-0+deb12u1|usr/share/doc/postgresql-doc-15/html|postgresql-doc-15|*.html"
  "git-doc=1:2.39.5-0+deb12u3|usr/share/doc/git-doc|git-doc|*.html"
  "sqlite3-doc=3.40.1-2+deb12u2|usr/share/doc/sqlite3|sqlite3-doc|*.html"
  "debian-policy=4.6.2.0|usr/share/doc/debian-policy|debian-policy|*.html"
  "debian-faq=11.1|usr/share/doc/debian/FAQ|debian-faq|*.en.html"
)

if [[ -e "$OUT" && -n "$(ls -A "$OUT" 2>/dev/null)" && ! -f "$OUT/FILES.tsv" ]]; then
  echo "fetch_fresh_docs: $OUT exists, is not empty and holds no FILES.tsv: not ours, refusing to write there" >&2
  exit 1
fi
rm -rf "$OUT/web_html" "$OUT/FILES.tsv"
mkdir -p "$OUT/web_html"
(
  cd "$CACHE"
  for spec in "${PACKAGES[@]}"; do
    apt-get download "${spec%%|*}" >/dev/null 2>&1 || { echo "fetch_fresh_docs: cannot download ${spec%%|*}" >&2; exit 1; }
  done
)
for spec in "${PACKAGES[@]}"; do
  IFS='|' read -r pkg src coll pattern <<<"$spec"
  name=${pkg%%=*}
  mkdir -p "$CACHE/x/$name"
  dpkg-deb -x "$CACHE/${name}_"*.deb "$CACHE/x/$name"
  (cd "$CACHE/x/$name/$src" && find . -type f -name "$pattern" -print0) |
    while IFS= read -r -d '' f; do
      mkdir -p "$OUT/web_html/$coll/$(dirname "$f")"
      cp "$CACHE/x/$name/$src/$f" "$OUT/web_html/$coll/$f"
    done
  printf '%s\t%s\n' "$coll" "$pkg" >>"$CACHE/packages.tsv"
done
cp "$CACHE/packages.tsv" "$OUT/PACKAGES.tsv"
(cd "$OUT" && find web_html -type f -print0 | sort -z | xargs -0 sha256sum | awk '{print $2 "\t" $1}') >"$OUT/FILES.tsv"
echo "fetch_fresh_docs: $(wc -l <"$OUT/FILES.tsv") files in $OUT"
