#!/usr/bin/env bash
# Builds the openssl command-line tool of OpenSSL 3.5 from Debian's packages
# and nothing else, once per machine, for the byte table of
# docs/migration-study.md: Debian 12's openssl is 3.0, which cannot offer
# X25519MLKEM768. The source is the upstream tarball of Debian 13's openssl
# source package (3.5.x), the same one scripts/build-nginx-openssl35.sh
# links into nginx, fetched through a PRIVATE apt configuration (its own
# sources.list with a deb-src line for trixie on the host the system's
# sources use, its own lists): the system's apt sources are left untouched.
#
# The result is cached outside the repository and linked statically:
#   $PQWATCH_OPENSSL35_DIR (default /var/cache/pqwatch/openssl35)
#     openssl  the binary (needs no library of the system's OpenSSL)
#     stamp    the version it was built from (written last: no stamp, no build)
#     failed   the last failed build's reason and log tail (removed on success)
# A later run with a stamp does nothing. -f rebuilds.
set -euo pipefail

CACHE=${PQWATCH_OPENSSL35_DIR:-/var/cache/pqwatch/openssl35}
FORCE=0
[ "${1:-}" = "-f" ] && FORCE=1

start=$(date +%s)
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9

if [ $FORCE = 0 ] && [ -s "$CACHE/stamp" ] && [ -x "$CACHE/openssl" ]; then
  echo "openssl35: cached in $CACHE: $(cat "$CACHE/stamp")"
  exit 0
fi
rm -f "$CACHE/stamp"

work=$(mktemp -d /var/tmp/openssl35.XXXXXX)
log=$work/build.log
fail() {
  {
    echo "build-openssl35.sh failed at $(date -u +%FT%TZ): $*"
    echo "--- last lines of the log:"
    tail -n 30 "$log" 2>/dev/null || true
  } >"$CACHE/failed"
  cat "$CACHE/failed" >&2
  exit 1
}
trap 'rm -rf "$work"' EXIT
trap 'fail "line $LINENO: $BASH_COMMAND"' ERR
trap 'fail "killed by SIGTERM"' TERM
: >"$log"

need=""
for p in dpkg-dev build-essential perl; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
  echo "openssl35: installing$need"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need) >>"$log" 2>&1 ||
    fail "apt-get install$need"
fi

host=$(grep -rhE '^[^#]*https?://[^ /]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
  grep -oE 'https?://[^ /]+/debian/?( |$)' | head -n1 | sed -E 's#/debian/? *$##' || true)
host=${host:-http://deb.debian.org}
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
key=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$apt_dir/sources.list" <<SRC
deb-src [signed-by=$key] $host/debian trixie main
deb-src [signed-by=$key] $host/debian-security trixie-security main
SRC
APT=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache::Archives="$apt_dir/archives"
  -o APT::Sandbox::User=root)
echo "openssl35: apt-get update (private sources: $host, trixie deb-src)"
apt-get "${APT[@]}" update >>"$log" 2>&1 || fail "apt-get update with the private sources"

mapfile -t ov < <(apt-cache "${APT[@]}" showsrc openssl 2>/dev/null | sed -n 's/^Version: //p' | grep -E '^3\.5\.' | sort -urV)
[ ${#ov[@]} -gt 0 ] || fail "no openssl 3.5 source in trixie"
v=""
for c in "${ov[@]}"; do
  mkdir -p "$work/src"
  if (cd "$work/src" && apt-get "${APT[@]}" source --download-only "openssl=$c") >>"$log" 2>&1; then
    v=$c
    break
  fi
  echo "openssl35: openssl $c not downloadable from $host, trying the next" >&2
  rm -rf "$work/src"
done
[ -n "$v" ] || fail "no openssl source of ${ov[*]} downloadable"
up=${v%%-*}
echo "openssl35: openssl $v; Configure no-shared, then nice make -j2 build_programs"
tar -C "$work/src" -xzf "$work/src/openssl_$up.orig.tar.gz" || fail "unpacking openssl $up"
cd "$work/src/openssl-$up" || fail "no openssl-$up directory in the tarball"
./Configure no-shared no-docs no-tests >>"$log" 2>&1 || fail "Configure"
nice make -j2 build_programs >>"$log" 2>&1 || fail "make"
strip -o apps/openssl.stripped apps/openssl
out=$(apps/openssl.stripped version 2>&1) || fail "the built openssl does not run: $out"
echo "$out" | grep -q "^OpenSSL $up" || fail "the built openssl says: $out"
install -m 0755 apps/openssl.stripped "$CACHE/openssl.new"
mv -f "$CACHE/openssl.new" "$CACHE/openssl"
rm -f "$CACHE/failed"
took=$(( $(date +%s) - start ))
echo "openssl=$v built=$(date -u +%FT%TZ) seconds=$took" >"$CACHE/stamp.new"
mv -f "$CACHE/stamp.new" "$CACHE/stamp"
echo "openssl35: built in ${took}s: $CACHE/openssl ($out)"
