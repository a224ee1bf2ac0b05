#!/usr/bin/env bash
# fetch_fresh_docs.sh -- documentation collections that no tokenmill design has read, for the
# held-out judgement of benchmarks/frozen/docs_kept_fresh.json (issue 55).
#
# Usage:  bash benchmarks/fetch_fresh_docs.sh [TARGET_DIR [SET]]   (default ../fresh_corpora docs1)
#
# SET docs1 is the set of benchmarks/frozen/docs_kept_fresh.json; docs2 to docs5 (each into its own
# TARGET_DIR) the sets of docs_kept_fresh2.json to docs_kept_fresh5.json;
# text1 the set of quality_signal2.json (GIMP's user manual in four languages and FocaLinux's
# Portuguese guide as gzipped plain text, under TARGET_DIR/docs/ instead of web_html/); web1 the
# documentation sites of template_pages.json (CMake's, Octave's and GnuCash's); text2 the set of
# quality_signal3.json (LilyPond's manuals in English, German, Spanish and French, under docs/); text3
# the set of quality_signal4.json (LibreOffice's help in the same four languages, under docs/).
#
# Registries only: six Debian bookworm packages at pinned versions, fetched with
# `apt-get download` and unpacked with `dpkg-deb -x` (no maintainer script runs, nothing is
# installed). Only regular files matching the set's pattern (.html; text1's FocaLinux: .txt.gz) are copied: a symlink (apache2-doc links every page a
# language has not translated to its English page) is left out, so a language folder holds only
# its own translations. TARGET_DIR/FILES.tsv lists every file with its sha256; the scorer checks
# the set's digest against the frozen one. About 40 MB, under a minute.
set -euo pipefail

OUT=$(readlink -m "${1:-../fresh_corpora}")
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT

# package=version|source folder inside the package|collection (under $TOP/)|name filter
SET=${2:-docs1}
TOP=web_html  # the folder under TARGET_DIR the collections go in (their paths in FILES.tsv start with it)
case "$SET" in
docs1) PACKAGES=(
  "apache2-doc=2.4.71-1~deb12u1|usr/share/doc/apache2-doc/manual|apache2-doc|*.html"
  "postgresql-doc-15=15.20-0+deb12u1|usr/share/doc/postgresql-doc-15/html|postgresql-doc-15|*.html"
  "git-doc=1:2.39.5-0+deb12u3|usr/share/doc/git-doc|git-doc|*.html"
  "sqlite3-doc=3.40.1-2+deb12u2|usr/share/doc/sqlite3|sqlite3-doc|*.html"
  "debian-policy=4.6.2.0|usr/share/doc/debian-policy|debian-policy|*.html"
  "debian-faq=11.1|usr/share/doc/debian/FAQ|debian-faq|*.en.html"
) ;;
docs2) PACKAGES=(
  "harden-doc=3.19+nmu1|usr/share/doc/harden-doc/html|harden-doc|*.html"
  "debian-faq=11.1|usr/share/doc/debian/FAQ|debian-faq/en|*.en.html"
  "nodejs-doc=18.20.4+dfsg-1~deb12u3|usr/share/doc/nodejs/api|nodejs-doc|*.html"
  "python-django-doc=3:3.2.25-0+deb12u7|usr/share/doc/python-django-doc/html|python-django-doc|*.html"
  "debian-kernel-handbook=1.0.21|usr/share/doc/debian-kernel-handbook/kernel-handbook.html|debian-kernel-handbook|*.html"
  "bash-doc=5.2.15-2|usr/share/doc/bash|gnu-manuals/bash|*.html"
  "gnu-standards=2022.03.23-0.1|usr/share/doc/gnu-standards|gnu-manuals/gnu-standards|*.html"
  "r-doc-html=4.2.2.20221110-2|usr/share/R/doc/manual|gnu-manuals/r-manuals|*.html"
)
  for lang in de fr it ja ko nl pt ru zh-cn; do
    PACKAGES+=("debian-faq-$lang=11.1|usr/share/doc/debian/FAQ/$lang|debian-faq/$lang|*.html")
  done ;;
docs3) PACKAGES=(
  "rust-doc=1.63.0+dfsg1-2|usr/share/doc/rust-doc/html/book|rust-doc/book|*.html"
  "rust-doc=1.63.0+dfsg1-2|usr/share/doc/rust-doc/html/reference|rust-doc/reference|*.html"
  "rust-doc=1.63.0+dfsg1-2|usr/share/doc/rust-doc/html/std|rust-doc/std|*.html"
  "sphinx-doc=5.3.0-4|usr/share/doc/sphinx-doc/html|sphinx-doc|*.html"
  "python-pandas-doc=1.5.3+dfsg-2|usr/share/doc/python-pandas-doc/html/user_guide|python-pandas-doc/guide/user_guide|*.html"
  "python-pandas-doc=1.5.3+dfsg-2|usr/share/doc/python-pandas-doc/html/getting_started|python-pandas-doc/guide/getting_started|*.html"
  "python-pandas-doc=1.5.3+dfsg-2|usr/share/doc/python-pandas-doc/html/development|python-pandas-doc/guide/development|*.html"
  "python-pandas-doc=1.5.3+dfsg-2|usr/share/doc/python-pandas-doc/html/reference|python-pandas-doc/reference|*.html"
  "debian-policy=4.6.2.0|usr/share/doc/debian-policy/policy.html|debian-policy/en|*.html"
  "debian-policy-ja=4.6.2.0|usr/share/doc/debian-policy/ja/policy.html|debian-policy/ja|*.html"
) ;;
docs4) PACKAGES=(
  "libstdc++-12-doc=12.2.0-14+deb12u1|usr/share/doc/gcc-12-base/libstdc++/manual|libstdc++-doc/manual|*.html"
  "libstdc++-12-doc=12.2.0-14+deb12u1|usr/share/doc/gcc-12-base/libstdc++/user|libstdc++-doc/api|*.html"
  "openjdk-17-doc=17.0.21.1+2-1~deb12u1|usr/share/doc/openjdk-17-jre-headless/api/java.base|openjdk-doc/java.base|*.html"
  "erlang-doc=1:25.2.3+dfsg-1+deb12u4|usr/share/doc/erlang-doc/doc|erlang-doc/guides|*.html"
  "erlang-doc=1:25.2.3+dfsg-1+deb12u4|usr/share/doc/erlang-doc/lib|erlang-doc/lib|*.html"
  "libgtk-3-doc=3.24.38-2~deb12u3|usr/share/gtk-doc/html/gtk3|gtk3-doc|*.html"
) ;;
docs5) PACKAGES=(
  "libsdl2-doc=2.26.5+dfsg-1|usr/share/doc/libsdl2-doc/html|libsdl2-doc|*.html"
  "libglib2.0-doc=2.74.6-2+deb12u9|usr/share/gtk-doc/html/glib|glib-doc/glib|*.html"
  "libglib2.0-doc=2.74.6-2+deb12u9|usr/share/gtk-doc/html/gio|glib-doc/gio|*.html"
  "libglib2.0-doc=2.74.6-2+deb12u9|usr/share/gtk-doc/html/gobject|glib-doc/gobject|*.html"
  "python-sqlalchemy-doc=1.4.46+ds1-1|usr/share/doc/python-sqlalchemy-doc/html|sqlalchemy-doc|*.html"
  "python-flask-doc=2.2.2-3|usr/share/doc/python-flask-doc/html|flask-doc|*.html"
  "python-werkzeug-doc=2.2.2-3+deb12u1|usr/share/doc/python-werkzeug-doc/html|werkzeug-doc|*.html"
) ;;
text1) TOP=docs PACKAGES=(
  "focalinux-text=2010-09-3.1|usr/share/doc/focalinux/text|focalinux|*.txt.gz"
)
  for lang in en de es fr; do
    PACKAGES+=("gimp-help-$lang=2.10.34-2|usr/share/gimp/2.0/help/$lang|gimp-help/$lang|*.html")
  done ;;
web1) PACKAGES=(
  "cmake-doc=3.25.1-1|usr/share/doc/cmake-data/html|cmake-doc|*.html"
  "octave-doc=7.3.0-2|usr/share/doc/octave/octave.html|octave-doc|*.html"
  "gnucash-docs=4.13-1|usr/share/doc/gnucash-docs/gnucash-guide-en|gnucash-docs/guide|*.html"
  "gnucash-docs=4.13-1|usr/share/doc/gnucash-docs/gnucash-help-en|gnucash-docs/help|*.html"
) ;;
text2) TOP=docs PACKAGES=(
  "lilypond-doc-html=2.24.1-2|usr/share/doc/lilypond/html|lilypond/en|*.html"
)
  for lang in de es fr; do
    PACKAGES+=("lilypond-doc-html-$lang=2.24.1-2|usr/share/doc/lilypond/html|lilypond/$lang|*.$lang.html")
  done ;;
text3) TOP=docs PACKAGES=(
  "libreoffice-help-en-us=4:7.4.7-1+deb12u14|usr/share/libreoffice/help/en-US|libreoffice-help/en|*.html"
)
  for lang in de es fr; do
    PACKAGES+=("libreoffice-help-$lang=4:7.4.7-1+deb12u14|usr/share/libreoffice/help/$lang|libreoffice-help/$lang|*.html")
  done ;;
*) echo "fetch_fresh_docs: unknown set $SET (docs1 to docs5, text1 to text3, web1)" >&2; exit 1 ;;
esac

if [[ -e "$OUT" && -n "$(ls -A "$OUT" 2>/dev/null)" && ! ( -f "$OUT/FILES.tsv" && -f "$OUT/PACKAGES.tsv" ) ]]; then
  echo "fetch_fresh_docs: $OUT exists, is not empty and holds no FILES.tsv and PACKAGES.tsv of an earlier fetch: not ours, refusing to write there" >&2
  exit 1
fi
rm -rf "${OUT:?}/$TOP" "$OUT/FILES.tsv"
mkdir -p "$OUT/$TOP"
(
  cd "$CACHE"
  for pkg in $(printf '%s\n' "${PACKAGES[@]}" | cut -d'|' -f1 | sort -u); do
    apt-get download "$pkg" >/dev/null 2>&1 || { echo "fetch_fresh_docs: cannot download $pkg" >&2; exit 1; }
  done
)
for spec in "${PACKAGES[@]}"; do
  IFS='|' read -r pkg src coll pattern <<<"$spec"
  name=${pkg%%=*}
  if [[ ! -d "$CACHE/x/$name" ]]; then
    mkdir -p "$CACHE/x/$name"
    dpkg-deb -x "$CACHE/${name}_"*.deb "$CACHE/x/$name"
  fi
  (cd "$CACHE/x/$name/$src" && find . -type f -name "$pattern" -print0) |
    while IFS= read -r -d '' f; do
      mkdir -p "$OUT/$TOP/$coll/$(dirname "$f")"
      cp "$CACHE/x/$name/$src/$f" "$OUT/$TOP/$coll/$f"
    done
  printf '%s\t%s\n' "$coll" "$pkg" >>"$CACHE/packages.tsv"
done
cp "$CACHE/packages.tsv" "$OUT/PACKAGES.tsv"
(cd "$OUT" && find "$TOP" -type f -print0 | sort -z | xargs -0 sha256sum | awk '{print $2 "\t" $1}') >"$OUT/FILES.tsv"
echo "fetch_fresh_docs: $(wc -l <"$OUT/FILES.tsv") files in $OUT"
