#!/usr/bin/env bash
# compare-analyze.sh [BASE_REV] [CAPTURE_DIR]: build pqwatch at BASE_REV
# (default HEAD~1) and from the working tree, run `analyze` in every -format
# on every capture under CAPTURE_DIR (default ../shared/corpus, when present),
# and report any capture whose output differs. Nothing is written to the
# repository; outputs stay in a temporary directory. Exit 1 on a difference.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-HEAD~1}
dir=${2:-../shared/corpus}
[ -d "$dir" ] || { echo "compare-analyze: no capture directory $dir" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$tmp/base" "$base"
(cd "$tmp/base" && CGO_ENABLED=0 go build -trimpath -o "$tmp/old" ./cmd/pqwatch)
CGO_ENABLED=0 go build -trimpath -o "$tmp/new" ./cmd/pqwatch
n=0 diffs=0
while IFS= read -r -d '' f; do
  for fmt in text json jsonl; do
    "$tmp/old" analyze -format "$fmt" "$f" >"$tmp/o" 2>"$tmp/oe" || true
    "$tmp/new" analyze -format "$fmt" "$f" >"$tmp/n" 2>"$tmp/ne" || true
    if ! cmp -s "$tmp/o" "$tmp/n" || ! cmp -s "$tmp/oe" "$tmp/ne"; then
      echo "DIFF $fmt $f"; diff "$tmp/o" "$tmp/n" | head -5 || true
      diffs=$((diffs + 1))
    fi
  done
  n=$((n + 1))
done < <(find "$dir" -type f \( -name '*.pcap' -o -name '*.pcapng' -o -name '*.cap' -o -name '*.pcap.gz' -o -name '*.pcapng.gz' \) -print0 | sort -z)
echo "compare-analyze: $n captures x 3 formats against $base: $diffs differences"
[ "$diffs" -eq 0 ]
