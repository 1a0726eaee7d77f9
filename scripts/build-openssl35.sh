#!/usr/bin/env bash
# Installs the openssl command of OpenSSL 3.5 from Debian 13's binary
# packages and nothing else, once per machine, for the byte table of
# docs/migration-study.md: Debian 12's openssl is 3.0, which cannot offer
# X25519MLKEM768. Nothing is compiled and nothing is installed into the
# system: the packages (openssl, libssl3t64 and the libraries they need,
# Debian 13's glibc among them) are unpacked into the cache, and a wrapper
# runs the binary through Debian 13's own dynamic loader with the cache's
# libraries first, so a Debian 12 host runs it without a chroot.
#
# Packages come through a PRIVATE apt configuration (its own sources.list
# with deb lines for trixie on the host the system's sources use, its own
# lists and archive cache): the system's apt sources are left untouched.
#
# The result is cached outside the repository:
#   $PQWATCH_OPENSSL35_DIR (default /var/cache/pqwatch/openssl35)
#     openssl  the wrapper to run
#     root/    the unpacked packages
#     stamp    the package versions (written last: no stamp, no install)
#     failed   the last failed run's reason and log tail (removed on success)
# A later run with a stamp does nothing. -f installs again.
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
log=$work/install.log
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

[ "$(dpkg --print-architecture)" = amd64 ] || fail "this script fetches amd64 packages; this host is $(dpkg --print-architecture)"
host=$(grep -rhE '^[^#]*https?://[^ /]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
  grep -oE 'https?://[^ /]+/debian/?( |$)' | head -n1 | sed -E 's#/debian/? *$##' || true)
host=${host:-http://deb.debian.org}
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$work/debs"
key=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$apt_dir/sources.list" <<SRC
deb [signed-by=$key] $host/debian trixie main
deb [signed-by=$key] $host/debian trixie-updates main
deb [signed-by=$key] $host/debian-security trixie-security main
SRC
APT=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache::Archives="$apt_dir/archives"
  -o Dir::State::Status=/dev/null -o APT::Sandbox::User=root)
echo "openssl35: apt-get update (private sources: $host, trixie)"
apt-get "${APT[@]}" update >>"$log" 2>&1 || fail "apt-get update with the private sources"

# The newest 3.5.x, with the libraries the binary and libssl need.
newest() { apt-cache "${APT[@]}" show "$1" 2>/dev/null | sed -n 's/^Version: //p' | grep -E "${2:-.}" | sort -V | tail -n1; }
v=$(newest openssl '^3\.5\.')
[ -n "$v" ] || fail "no openssl 3.5 package in trixie"
pkgs=("openssl=$v" "libssl3t64=$v")
for p in libc6 libzstd1 zlib1g; do
  pv=$(newest "$p")
  [ -n "$pv" ] || fail "no $p package in trixie"
  pkgs+=("$p=$pv")
done
echo "openssl35: ${pkgs[*]}"
(cd "$work/debs" && apt-get "${APT[@]}" download "${pkgs[@]}") >>"$log" 2>&1 || fail "apt-get download ${pkgs[*]}"
rm -rf "$CACHE/root.new"
mkdir -p "$CACHE/root.new"
for d in "$work"/debs/*.deb; do
  dpkg-deb -x "$d" "$CACHE/root.new" >>"$log" 2>&1 || fail "dpkg-deb -x $d"
done
rm -rf "$CACHE/root"
mv "$CACHE/root.new" "$CACHE/root"
lib=$CACHE/root/usr/lib/x86_64-linux-gnu
[ -x "$lib/ld-linux-x86-64.so.2" ] || fail "no ld-linux-x86-64.so.2 in Debian 13's libc6"
cat >"$CACHE/openssl.new" <<WRAP
#!/bin/sh
# OpenSSL $v from Debian 13's packages, through Debian 13's loader
# (scripts/build-openssl35.sh).
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --argv0 openssl "$CACHE/root/usr/bin/openssl" "\$@"
WRAP
chmod 0755 "$CACHE/openssl.new"
out=$("$CACHE/openssl.new" version 2>&1) || fail "the unpacked openssl does not run: $out"
echo "$out" | grep -q "^OpenSSL ${v%%-*}" || fail "the unpacked openssl says: $out"
mv -f "$CACHE/openssl.new" "$CACHE/openssl"
rm -f "$CACHE/failed"
took=$(( $(date +%s) - start ))
echo "openssl=$v libc6=${pkgs[2]#libc6=} installed=$(date -u +%FT%TZ) seconds=$took" >"$CACHE/stamp.new"
mv -f "$CACHE/stamp.new" "$CACHE/stamp"
echo "openssl35: installed in ${took}s: $CACHE/openssl ($out)"
