#!/bin/bash
# docs_links.sh -- every relative link of the repository's Markdown resolves.
#
# For each tracked *.md file (README.md, docs/, bench/README.md, ...), every
# inline link or image `[text](target)` whose target is not a URL must name
# a file or folder that exists, relative to the linking file, and a
# `#fragment` must be a heading of the target page (GitHub's anchor: the
# heading in lower case, punctuation but `-` and `_` dropped, spaces as `-`;
# a repeated heading's later copies get -1, -2 ...).  Links may not leave the
# repository.  Code blocks (``` fences) are skipped.  And every page the
# sources cite by name (docs/<page>.md in a comment or a message) exists.
#
# Usage: tests/docs_links.sh SOURCE_DIR
# Prints one line per broken link (FILE:LINE: target: why); exit 1 if any.
set -u
root=$(cd "${1:?source dir}" && pwd -P) || exit 2
cd "$root" || exit 2

# The anchors of one Markdown file, one a line.
anchors() {
    awk '
        /^```/ { fence = !fence; next }
        fence { next }
        /^#+ / {
            h = $0; sub(/^#+ /, "", h); h = tolower(h)
            gsub(/[^a-z0-9_ \-]/, "", h); gsub(/ /, "-", h)
            if (h in seen) { n = seen[h]++; print h "-" n } else { seen[h] = 1; print h }
        }' "$1"
}

files=$(git ls-files '*.md' 2>/dev/null || find . -name '*.md' -not -path './build*')
bad=0
checked=0
declare -A seen_anchors=()
for f in $files; do
    dir=$(dirname "$f")
    # FILE-LINE and target of each link outside code fences.
    while IFS=$'\t' read -r line target; do
        checked=$((checked + 1))
        path=${target%%#*}
        frag=
        [[ $target == *'#'* ]] && frag=${target#*#}
        if [[ -z $path ]]; then
            dest=$f
        else
            dest=$dir/$path
            if [[ ! -e $dest ]]; then
                echo "$f:$line: $target: no such file"; bad=1; continue
            fi
            if [[ $path == *..* ]]; then
                real=$(cd "$(dirname "$dest")" && pwd -P)
                case "$real/" in
                    "$root"/*) ;;
                    *) echo "$f:$line: $target: outside the repository"; bad=1; continue ;;
                esac
            fi
        fi
        if [[ -n $frag ]]; then
            if [[ -d $dest || $dest != *.md ]]; then
                continue        # a line anchor in a source file: not checked
            fi
            if [[ -z ${seen_anchors[$dest]+x} ]]; then
                seen_anchors[$dest]=$'\n'$(anchors "$dest")$'\n'
            fi
            if [[ ${seen_anchors[$dest]} != *$'\n'"$frag"$'\n'* ]]; then
                echo "$f:$line: $target: no heading \"#$frag\" in $dest"; bad=1
            fi
        fi
    done < <(awk '
        /^```/ { fence = !fence; next }
        fence { next }
        {
            s = $0
            while (match(s, /\]\([^) \t]+\)/)) {
                t = substr(s, RSTART + 2, RLENGTH - 3)
                if (t !~ /^[a-z][a-z0-9+.-]*:/) print FNR "\t" t
                s = substr(s, RSTART + RLENGTH)
            }
        }' "$f")
done
# The pages the sources cite by name ("docs/decisions.md, section 3.8",
# "docs/tables.md"): each must exist, so that a page that moves takes its
# citations along.
cited=0
while IFS=: read -r f line page; do
    cited=$((cited + 1))
    [[ -e $page ]] || { echo "$f:$line: cites $page: no such page"; bad=1; }
done < <(git grep -noE 'docs/[A-Za-z0-9_-]+\.md' -- '*.c' '*.h' '*.py' '*.sh' '*.txt' \
             'CMakeLists.txt' '*.cmake' '*.toml' '*.js' '*.ts' 2>/dev/null | grep -v '^tests/fuzz/corpus/')
if [[ $checked -eq 0 ]]; then
    echo "docs_links.sh: no links found under $root"; exit 1
fi
[[ $bad -eq 0 ]] && echo "docs_links.sh: $checked relative links resolve; $cited citations of docs/ pages in the sources name pages that exist"
exit $bad
