#!/usr/bin/env bash
# compare-analyze.sh [BASE_REV] [CAPTURE|DIR]...: build pqwatch at BASE_REV
# (default HEAD~1) and from the working tree, run `analyze` on every capture
# named (a file, or a directory searched for *.pcap, *.pcapng, *.cap and
# their .gz; default ../shared/corpus, when present) and on testdata's, and
# report any capture whose output differs: every -format with the capture
# read as a file (stdout and stderr), and -format jsonl and json with it read
# from stdin, plain and gzip-compressed. Nothing is written to the
# repository; outputs stay in a temporary directory. Exit 1 on a difference.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-HEAD~1}
shift || true
[ $# -gt 0 ] || set -- ../shared/corpus
files=()
for a in testdata "$@"; do
  if [ -d "$a" ]; then
    while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$a" -type f \( -name '*.pcap' -o -name '*.pcapng' -o -name '*.cap' -o -name '*.pcap.gz' -o -name '*.pcapng.gz' \) -print0 | sort -z)
  elif [ -f "$a" ]; then
    files+=("$a")
  else
    echo "compare-analyze: no capture or directory $a" >&2; exit 2
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$tmp/base" "$base"
(cd "$tmp/base" && CGO_ENABLED=0 go build -trimpath -o "$tmp/old" ./cmd/pqwatch)
CGO_ENABLED=0 go build -trimpath -o "$tmp/new" ./cmd/pqwatch
# run BIN HOW FORMAT FILE OUT: analyze's stdout in OUT, stderr in OUT.err.
run() {
  case $2 in
  file) "$1" analyze -format "$3" "$4" >"$5" 2>"$5.err" || true ;;
  stdin) "$1" analyze -format "$3" - <"$4" >"$5" 2>"$5.err" || true ;;
  gzip) gzip -1c <"$4" | "$1" analyze -format "$3" - >"$5" 2>"$5.err" || true ;;
  esac
}
n=0 outs=0 diffs=0 records=0
for f in "${files[@]}"; do
  for how in file stdin gzip; do
    fmts="json jsonl"
    [ $how = file ] && fmts="text json jsonl"
    for fmt in $fmts; do
      run "$tmp/old" $how "$fmt" "$f" "$tmp/o"
      run "$tmp/new" $how "$fmt" "$f" "$tmp/n"
      if ! cmp -s "$tmp/o" "$tmp/n" || ! cmp -s "$tmp/o.err" "$tmp/n.err"; then
        echo "DIFF $how $fmt $f"; { diff "$tmp/o" "$tmp/n"; diff "$tmp/o.err" "$tmp/n.err"; } | head -6 || true
        diffs=$((diffs + 1))
      fi
      outs=$((outs + 1))
      if [ $how = file ] && [ "$fmt" = jsonl ]; then
        records=$((records + $(grep -c '^{' "$tmp/n" || true)))
      fi
    done
  done
  n=$((n + 1))
done
echo "compare-analyze: $n captures, $outs outputs (file: every format; stdin and gzip: json, jsonl), $records records, against $base: $diffs differences"
[ "$diffs" -eq 0 ]
