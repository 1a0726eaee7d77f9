#!/usr/bin/env bash
# Builds nginx on OpenSSL 3.5 from Debian's packages and nothing else, once
# per machine, for the OpenSSL 3.0 -> 3.5 swap tests (testenv.NginxOpenSSL35):
#
#   Debian 12's nginx source package (the installed nginx's version when the
#   mirror still has it, else the newest 1.22.1 it has), configured with
#   Debian's flags (debian/rules' basic_configure_flags and the static http
#   modules of its nginx binary) plus --with-openssl= the upstream tarball of
#   Debian 13's openssl source package (3.5.x), which nginx's configure builds
#   and links statically. A Debian 12 nginx master can exec the result on
#   USR2: same nginx, same paths, only the TLS library differs.
#
# Sources come through a PRIVATE apt configuration (its own sources.list with
# deb-src lines for bookworm and trixie on the host the system's sources use,
# its own lists): the system's apt sources are left untouched.
#
# The result is cached outside the repository:
#   $PQWATCH_NGINX_OPENSSL35_DIR (default /var/cache/pqwatch/nginx-openssl35)
#     nginx   the binary
#     stamp   the versions it was built from (written last: no stamp, no build)
#     failed  the last failed build's reason and log tail (removed on success)
# A later run with a stamp does nothing (0.1 s). -f rebuilds. Takes about 6
# minutes on 2 idle cores (nice make -j2); 1211 s measured on 2 cores shared
# with other test runs (load average 10-17).
set -euo pipefail

CACHE=${PQWATCH_NGINX_OPENSSL35_DIR:-/var/cache/pqwatch/nginx-openssl35}
FORCE=0
[ "${1:-}" = "-f" ] && FORCE=1

start=$(date +%s)
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9 # one build at a time; a second caller waits and then finds the stamp

if [ $FORCE = 0 ] && [ -s "$CACHE/stamp" ] && [ -x "$CACHE/nginx" ]; then
  echo "nginx-openssl35: cached in $CACHE: $(cat "$CACHE/stamp")"
  exit 0
fi
rm -f "$CACHE/stamp"

work=$(mktemp -d /var/tmp/nginx-openssl35.XXXXXX)
log=$work/build.log
fail() {
  {
    echo "build-nginx-openssl35.sh failed at $(date -u +%FT%TZ): $*"
    echo "--- last lines of the log:"
    tail -n 30 "$log" 2>/dev/null || true
  } >"$CACHE/failed"
  cat "$CACHE/failed" >&2
  exit 1
}
trap 'rm -rf "$work"' EXIT
trap 'fail "line $LINENO: $BASH_COMMAND"' ERR
trap 'fail "killed by SIGTERM (a time limit such as .ci/run'"'"'s?)"' TERM
: >"$log"

# The tools: dpkg-source (dpkg-dev), a compiler, nginx's libraries (PCRE2,
# zlib), perl (OpenSSL's Configure). From the system's ordinary sources.
need=""
for p in dpkg-dev build-essential libpcre2-dev zlib1g-dev perl; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
  echo "nginx-openssl35: installing$need"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need) >>"$log" 2>&1 ||
    fail "apt-get install$need"
fi

# The private apt configuration, on the mirror host the system uses.
host=$(grep -rhE '^[^#]*https?://[^ /]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
  grep -oE 'https?://[^ /]+/debian/?( |$)' | head -n1 | sed -E 's#/debian/? *$##' || true)
host=${host:-http://deb.debian.org}
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
key=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$apt_dir/sources.list" <<EOF
deb-src [signed-by=$key] $host/debian bookworm main
deb-src [signed-by=$key] $host/debian bookworm-updates main
deb-src [signed-by=$key] $host/debian-security bookworm-security main
deb-src [signed-by=$key] $host/debian trixie main
deb-src [signed-by=$key] $host/debian-security trixie-security main
EOF
APT=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache::Archives="$apt_dir/archives"
  -o APT::Sandbox::User=root)
echo "nginx-openssl35: apt-get update (private sources: $host, bookworm + trixie deb-src)"
apt-get "${APT[@]}" update >>"$log" 2>&1 || fail "apt-get update with the private sources"

# Versions, newest first; the mirror may list a version whose files it no
# longer serves, so each is tried in turn.
versions() { apt-cache "${APT[@]}" showsrc "$1" 2>/dev/null | sed -n 's/^Version: //p' | grep -E "$2" | sort -urV; }
fetch() { # package version...: the first version whose files download
  local pkg=$1 v
  shift
  for v in "$@"; do
    mkdir -p "$work/src/$pkg-$v"
    if (cd "$work/src/$pkg-$v" && apt-get "${APT[@]}" source --download-only "$pkg=$v") >>"$log" 2>&1; then
      echo "$v"
      return 0
    fi
    echo "nginx-openssl35: $pkg $v not downloadable from $host, trying the next" >&2
    rm -rf "$work/src/$pkg-$v"
  done
  return 1
}

inst=$(dpkg-query -W -f '${Version}' nginx 2>/dev/null || true)
upstream=${inst%%-*}
upstream=${upstream:-1.22.1}
mapfile -t nv < <( { [ -n "$inst" ] && echo "$inst"; versions nginx "^${upstream//./\\.}-"; } | awk '!seen[$0]++')
[ ${#nv[@]} -gt 0 ] || fail "no nginx $upstream source in bookworm"
nginx_v=$(fetch nginx "${nv[@]}") || fail "no nginx source of ${nv[*]} downloadable"
mapfile -t ov < <(versions openssl '^3\.5\.')
[ ${#ov[@]} -gt 0 ] || fail "no openssl 3.5 source in trixie"
openssl_v=$(fetch openssl "${ov[@]}") || fail "no openssl source of ${ov[*]} downloadable"
echo "nginx-openssl35: nginx $nginx_v (installed: ${inst:-none}), openssl $openssl_v"

# nginx with Debian's patches; OpenSSL's upstream tarball as it is.
ndir=$work/src/nginx-$nginx_v
(cd "$ndir" && dpkg-source -x ./*.dsc tree) >>"$log" 2>&1 || fail "dpkg-source -x nginx $nginx_v"
odir=$work/src/openssl-$openssl_v
tar -C "$odir" -xzf "$odir"/openssl_"${openssl_v%%-*}".orig.tar.gz || fail "unpacking openssl ${openssl_v%%-*}"
osrc=$(find "$odir" -mindepth 1 -maxdepth 1 -type d -name 'openssl-*' | head -n1)
[ -n "$osrc" ] || fail "no openssl-* directory in the tarball"

cd "$ndir/tree"
# debian/rules: basic_configure_flags and the static http modules of the
# nginx binary package (not mail, stream and the dynamic modules: the tests
# do not load them, and a master never loads modules on USR2 unless told).
cflags=$(dpkg-buildflags --get CFLAGS)
ldflags=$(dpkg-buildflags --get LDFLAGS)
echo "nginx-openssl35: configure, then nice make -j2 (6-20 minutes on 2 cores)"
./configure \
  --with-cc-opt="$cflags -fPIC $(dpkg-buildflags --get CPPFLAGS)" \
  --with-ld-opt="$ldflags -fPIC" \
  --prefix=/usr/share/nginx \
  --conf-path=/etc/nginx/nginx.conf \
  --http-log-path=/var/log/nginx/access.log \
  --error-log-path=stderr \
  --lock-path=/var/lock/nginx.lock \
  --pid-path=/run/nginx.pid \
  --modules-path=/usr/lib/nginx/modules \
  --http-client-body-temp-path=/var/lib/nginx/body \
  --http-fastcgi-temp-path=/var/lib/nginx/fastcgi \
  --http-proxy-temp-path=/var/lib/nginx/proxy \
  --http-scgi-temp-path=/var/lib/nginx/scgi \
  --http-uwsgi-temp-path=/var/lib/nginx/uwsgi \
  --with-compat \
  --with-debug \
  --with-pcre-jit \
  --with-http_ssl_module \
  --with-http_stub_status_module \
  --with-http_realip_module \
  --with-http_auth_request_module \
  --with-http_v2_module \
  --with-http_dav_module \
  --with-http_slice_module \
  --with-threads \
  --with-http_addition_module \
  --with-http_flv_module \
  --with-http_gunzip_module \
  --with-http_gzip_static_module \
  --with-http_mp4_module \
  --with-http_random_index_module \
  --with-http_secure_link_module \
  --with-http_sub_module \
  --with-openssl="$osrc" \
  --with-openssl-opt="no-docs no-tests no-apps" >>"$log" 2>&1 || fail "nginx configure"
nice make -j2 >>"$log" 2>&1 || fail "make"
strip -o objs/nginx.stripped objs/nginx

out=$(./objs/nginx -V 2>&1) || fail "the built nginx does not run: $out"
echo "$out" | grep -q "built with OpenSSL ${openssl_v%%-*}" || fail "the built nginx says: $out"
install -m 0755 objs/nginx.stripped "$CACHE/nginx.new"
mv -f "$CACHE/nginx.new" "$CACHE/nginx"
rm -f "$CACHE/failed"
took=$(( $(date +%s) - start ))
echo "nginx=$nginx_v openssl=$openssl_v built=$(date -u +%FT%TZ) seconds=$took" >"$CACHE/stamp.new"
mv -f "$CACHE/stamp.new" "$CACHE/stamp"
echo "nginx-openssl35: built in ${took}s: $CACHE/nginx ($(cat "$CACHE/stamp"))"
echo "$out" | head -n2
