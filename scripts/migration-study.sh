#!/usr/bin/env bash
# Reproduces the tables of docs/migration-study.md on this machine (as root,
# loopback only): nginx moved from OpenSSL 3.0 to OpenSSL 3.5 with
# ssl_ecdh_curve X25519MLKEM768:X25519:prime256v1.
#
#   scripts/migration-study.sh cpu     server CPU per full handshake: OpenSSL 3.0
#                                      classical, 3.5 classical, 3.5 hybrid
#                                      (pqwatch loadgen, trials shuffled)
#   scripts/migration-study.sh swap    the A (3.0) -> B (3.5 hybrid) USR2/WINCH/QUIT
#                                      swap under load watched by pqwatch run, its
#                                      timeline per generation (generations.svg),
#                                      then the naive rollback and pqwatch's
#                                      failed event
#   scripts/migration-study.sh bytes   ClientHello/ServerHello bytes of OpenSSL
#                                      3.5's s_client -groups X25519 and
#                                      X25519MLKEM768 against Caddy (pqwatch analyze)
#   scripts/migration-study.sh all     the three
#   scripts/migration-study.sh cpu-table  the cpu tables again, from OUT's trials
#
# Needs: bin/pqwatch (make build), Debian 12's nginx (/usr/sbin/nginx, OpenSSL
# 3.0), nginx on OpenSSL 3.5 (make nginx-openssl35), the openssl command of
# OpenSSL 3.5 (make openssl35), caddy, tcpdump or dumpcap, jq, Go (the chart).
# Settings (environment): OUT (default /tmp/pqwatch-study), RATE (100),
# DURATION (20), WARMUP (1), TRIALS (6, per configuration), SEED (1),
# SWAP_RATE (100), PORT_BASE (18440), SNI (localhost), LOADGEN_FLAGS (more flags for the cpu
# trials' loadgen).
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/pqwatch-study}
RATE=${RATE:-100}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-1}
TRIALS=${TRIALS:-6}
SEED=${SEED:-1}
SWAP_RATE=${SWAP_RATE:-100}
PORT_BASE=${PORT_BASE:-18440}
SNI=${SNI:-localhost} # the server name s_client sends to Caddy (bytes)
LOADGEN_FLAGS=${LOADGEN_FLAGS:-} # more loadgen flags for the cpu trials, e.g. -max-send-lag 50ms
PQWATCH=$REPO/bin/pqwatch
NGINX30=${NGINX30:-/usr/sbin/nginx}
NGINX35=${PQWATCH_NGINX_OPENSSL35_DIR:-/var/cache/pqwatch/nginx-openssl35}/nginx
OPENSSL35=${PQWATCH_OPENSSL35_DIR:-/var/cache/pqwatch/openssl35}/openssl
CADDY=${CADDY:-$(command -v caddy || echo "$HOME/go/bin/caddy")}
HYBRID=X25519MLKEM768:X25519:prime256v1

die() { echo "migration-study: $*" >&2; exit 1; }
need() { # file-or-command fix
  [ -x "$1" ] || command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"
}
need "$PQWATCH" "run make build"
need jq "apt-get install jq"
[ "$(id -u)" = 0 ] || die "run as root (loadgen reads the server's schedstat, pqwatch run captures lo)"

pids=() # processes this script started, stopped on exit
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# cert DIR: an ECDSA P-256 self-signed certificate for localhost.
cert() {
  [ -s "$1/cert.pem" ] && return
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost -days 2 -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
}

# nginx_conf DIR PORT CURVES WORKERS: nginx's configuration in DIR.
nginx_conf() {
  local d=$1 port=$2 curves=$3 workers=$4
  mkdir -p "$d/logs" "$d/tmp"
  cert "$d"
  cat >"$d/nginx.conf" <<EOF
worker_processes $workers;
pid $d/nginx.pid;
error_log $d/error.log notice;
events { worker_connections 4096; }
http {
    log_format pq '\$remote_addr \$remote_port \$msec \$ssl_protocol \$ssl_cipher \$ssl_curve "\$ssl_curves" \$pid \$connection "\$request" \$status "\$http_user_agent" "\$host"';
    access_log $d/access.log pq;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    server {
        listen 127.0.0.1:$port ssl;
        server_name localhost;
        ssl_certificate $d/cert.pem;
        ssl_certificate_key $d/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ecdh_curve $curves;
        ssl_session_tickets off;
        ssl_session_cache off;
        keepalive_timeout 0;
        location / {
            add_header X-Pid \$pid always;
            return 200 "ok\n";
        }
    }
}
EOF
}

# nginx_start BIN DIR: starts nginx (a daemon) from BIN, prints its master.
nginx_start() {
  local bin=$1 d=$2 i
  rm -f "$d/nginx.pid"
  "$bin" -p "$d" -c "$d/nginx.conf" -e "$d/error.log" || die "$bin did not start: see $d/error.log"
  for i in $(seq 50); do
    [ -s "$d/nginx.pid" ] && { cat "$d/nginx.pid"; return; }
    sleep 0.1
  done
  die "$bin wrote no pid file in 5 s: see $d/error.log"
}

# nginx_stop MASTER: QUIT, and wait up to 10 s.
nginx_stop() {
  local m=$1 i
  kill -QUIT "$m" 2>/dev/null || return 0
  for i in $(seq 100); do kill -0 "$m" 2>/dev/null || return 0; sleep 0.1; done
  kill -TERM "$m" 2>/dev/null || true
}

# openssl_of NGINX: the OpenSSL it runs with (a dynamically linked nginx
# may run with another version than it was built with).
openssl_of() {
  local v
  v=$("$1" -V 2>&1 | sed -n 's/^built with .*(running with \(OpenSSL [^ ]*\).*/\1/p')
  [ -n "$v" ] || v=$("$1" -V 2>&1 | sed -n 's/^built with \(OpenSSL [^ ]*\).*/\1/p')
  echo "$v"
}

# cpu_tables DIR: the CPU table (DIR/table.md) and the trials (DIR/trials.md,
# DIR/trials.json) from the trials in DIR.
cpu_tables() {
  local dir=$1 name lib curves f n
  # The table: mean and sample sd per configuration over its valid trials,
  # and over every trial (invalid ones included) beside it, for a host too
  # busy for valid trials; the trials themselves in trials.md.
  {
    echo "| configuration | TLS library | ssl_ecdh_curve | clients offer | negotiated | valid trials | server CPU µs per full handshake, valid trials (± sd) | vs OpenSSL 3.0 classical | every trial, invalid ones included (± sd) | vs OpenSSL 3.0 classical |"
    echo "|---|---|---|---|---|--:|--:|--:|--:|--:|"
    local base="" baseAll=""
    while IFS='|' read -r name lib curves; do
      jq -rs --arg name "$name" --arg lib "$lib" --arg curves "$curves" --arg base "$base" --arg baseAll "$baseAll" '
        def stats: (length) as $n | (if $n > 0 then (add / $n) else null end) as $m
          | {n: $n, m: $m, sd: (if $n > 1 then ((map((. - $m) * (. - $m)) | add) / ($n - 1) | sqrt) else 0 end)};
        def dec1: if . < 0 then "-" + (-. | dec1) else (. * 10 | round) as $r | "\(($r - $r % 10) / 10).\($r % 10)" end;
        def fmt: if .m then "\(.m | dec1) ± \(.sd | dec1)" else "no valid trial" end;
        def vs($b): if .m and ($b != "") then ((.m / ($b | tonumber) - 1) * 100) as $p | "\(if $p >= 0 then "+" else "" end)\($p | dec1)%" elif .m then "+0.0%" else "" end;
        (.[0].arms[0].groups | join(",")) as $offer | [.[] | .trials[0]] as $all
        | ([$all[] | select(.valid) | .server_cpu_us_per_handshake] | stats) as $v
        | ([$all[] | .server_cpu_us_per_handshake | select(. != null)] | stats) as $e
        | ([$all[] | .groups // {} | to_entries[]] | group_by(.key) | map("\(.[0].key) \(map(.value) | add)") | join(", ")) as $g
        | "| \($name) | \($lib) | `\($curves)` | \($offer) | \($g) | \($v.n)/\($all | length) | \($v | fmt) | \($v | vs($base)) | \($e | fmt) | \($e | vs($baseAll)) |"' \
        "$dir"/trials/*-"$name"-*/results.json
      if [ -z "$baseAll" ]; then
        base=$(jq -s '[.[] | .trials[0] | select(.valid) | .server_cpu_us_per_handshake] | if length > 0 then add / length else "" end' \
          "$dir"/trials/*-"$name"-*/results.json | tr -d '"')
        baseAll=$(jq -s '[.[] | .trials[0] | .server_cpu_us_per_handshake | select(. != null)] | if length > 0 then add / length else "" end' \
          "$dir"/trials/*-"$name"-*/results.json | tr -d '"')
      fi
    done <"$dir/configs"
  } >"$dir/table.md"
  {
    echo "| # | configuration | trial | valid | server CPU µs per handshake | completed | send lag p99 ms | invalid because |"
    echo "|--:|---|--:|---|--:|--:|--:|---|"
    for f in "$dir"/trials/*/results.json; do
      n=${f#"$dir"/trials/}
      n=${n%%/*}
      jq -r --arg n "$n" '.trials[0] | "| \($n | split("-")[0]) | \($n | split("-")[1:-1] | join("-")) | \($n | split("-")[-1]) | \(.valid) | \(.server_cpu_us_per_handshake // "" | if . == "" then "" else (. * 10 | round / 10) end) | \(.completed) | \(.send_lag_ms.p99 * 10 | round / 10) | \((.invalid_reasons // []) | map(split(":")[0]) | join(", ")) |"' "$f"
    done | sort -t'|' -k2 -n
  } >"$dir/trials.md"
  for f in "$dir"/trials/*/results.json; do
    n=${f#"$dir"/trials/}
    n=${n%%/*}
    jq -c --arg n "$n" '.trials[0] | {n: ($n | split("-")[0] | tonumber), config: ($n | split("-")[1:-1] | join("-")),
      trial: ($n | split("-")[-1] | tonumber), valid, server_cpu_us_per_handshake, groups, invalid_reasons}' "$f"
  done | jq -s 'sort_by(.n)' >"$dir/trials.json"
}

# --- server CPU per full handshake, three configurations, trials shuffled.
study_cpu() {
  need "$NGINX30" "apt-get install nginx"
  need "$NGINX35" "make nginx-openssl35"
  local dir=$OUT/cpu
  rm -rf "$dir"
  mkdir -p "$dir"
  # name binary curves loadgen-arm
  local configs=(
    "openssl30-classical $NGINX30 X25519 classical=x25519"
    "openssl35-classical $NGINX35 X25519 classical=x25519"
    "openssl35-hybrid $NGINX35 $HYBRID hybrid=X25519MLKEM768,x25519"
  )
  local i=0 c name bin curves arm port
  declare -A portOf armOf
  for c in "${configs[@]}"; do
    read -r name bin curves arm <<<"$c"
    port=$((PORT_BASE + i))
    i=$((i + 1))
    nginx_conf "$dir/$name" "$port" "$curves" 1
    local m
    m=$(nginx_start "$bin" "$dir/$name")
    pids+=("$m")
    portOf[$name]=$port
    armOf[$name]=$arm
    echo "$name: $(openssl_of "$bin"), ssl_ecdh_curve $curves, 127.0.0.1:$port, master $m"
    echo "$name|$(openssl_of "$bin")|$curves" >>"$dir/configs"
  done
  # Every configuration x trial in one shuffled order (seeded).
  local order
  order=$(for c in "${configs[@]}"; do
    read -r name _ <<<"$c"
    for t in $(seq "$TRIALS"); do echo "$name $t"; done
  done | awk -v seed="$SEED" 'BEGIN { srand(seed) } { printf "%.9f %s\n", rand(), $0 }' | sort -n | cut -d' ' -f2-)
  echo "$order" >"$dir/order"
  local n=0 t
  while read -r name t; do
    n=$((n + 1))
    echo "trial $n: $name #$t"
    "$PQWATCH" loadgen -target "127.0.0.1:${portOf[$name]}" -sni localhost -insecure -arm "${armOf[$name]}" \
      -rate "$RATE" -duration "$DURATION" -warmup "$WARMUP" -trials 1 -seed "$n" \
      $LOADGEN_FLAGS -out "$dir/trials/$n-$name-$t" >"$dir/trials-$n.md" 2>"$dir/trials-$n.err" ||
      echo "  trial $n ($name #$t) exit $?: $(grep -m1 -i 'invalid\|error' "$dir/trials-$n.err" || true)"
  done <<<"$order"
  cpu_tables "$dir"
  cat "$dir/table.md"
  for m in "${pids[@]}"; do nginx_stop "$m"; done
  pids=()
}

# --- the swap: A (Debian's nginx, OpenSSL 3.0) -> B (nginx on OpenSSL 3.5,
# hybrid), then the naive rollback, watched by pqwatch run.
study_swap() {
  need "$NGINX30" "apt-get install nginx"
  need "$NGINX35" "make nginx-openssl35"
  local dir=$OUT/swap port=$((PORT_BASE + 5)) mport=$((PORT_BASE + 6))
  rm -rf "$dir"
  mkdir -p "$dir/nginx/sbin"
  local d=$dir/nginx
  cp "$NGINX30" "$d/sbin/nginx"
  nginx_conf "$d" "$port" "X25519:prime256v1" 2
  local a b
  a=$(nginx_start "$d/sbin/nginx" "$d")
  pids+=("$a")
  echo "A: master $a, $(openssl_of "$d/sbin/nginx"), ssl_ecdh_curve X25519:prime256v1, 127.0.0.1:$port"
  "$PQWATCH" run -iface lo -ports "$port" -nginx-conf "$d/nginx.conf" -nginx-log "$d/access.log" \
    -nginx-error-log "$d/error.log" -format jsonl -line-buffered -o "$dir/records.jsonl" \
    -metrics-addr "127.0.0.1:$mport" 2>"$dir/pqwatch.log" &
  local agent=$!
  pids+=("$agent")
  local i
  for i in $(seq 100); do
    curl -s "http://127.0.0.1:$mport/metrics" 2>/dev/null | grep -q "^pqwatch_generation_info{.*master_pid=\"$a\"" && break
    kill -0 "$agent" 2>/dev/null || die "pqwatch run exited: see $dir/pqwatch.log"
    sleep 0.1
  done
  echo "pqwatch run (pid $agent) sees A"
  # B: the new binary and the study's config line, in place; USR2 execs it.
  cp "$NGINX35" "$d/sbin/nginx.new" && mv -f "$d/sbin/nginx.new" "$d/sbin/nginx"
  sed -i "s/ssl_ecdh_curve .*;/ssl_ecdh_curve $HYBRID;/" "$d/nginx.conf"
  echo "swap: USR2, WINCH, QUIT to master $a at 4, 8 and 12 s under $SWAP_RATE handshakes/s"
  "$PQWATCH" loadgen -target "127.0.0.1:$port" -sni localhost -insecure -arm hybrid=X25519MLKEM768,x25519 \
    -rate "$SWAP_RATE" -duration 15 -warmup 1 -trials 1 -scenario swap -server-pid "$a" -scenario-at 4,8,12 \
    -max-send-lag -1ms -out "$dir/loadgen" >"$dir/loadgen.md" 2>"$dir/loadgen.err" ||
    echo "  loadgen exit $? (see $dir/loadgen.err)"
  jq -r '.scenarios[] | "  scenario \(.kind): \(.status), old master \(.old_master), new master \(.new_master)"' "$dir/loadgen/results.json"
  b=$(cat "$d/nginx.pid")
  pids+=("$b")
  echo "B: master $b, $(openssl_of "$d/sbin/nginx")"
  # The naive rollback: the old binary back in place, the hybrid config
  # left, USR2 to B. OpenSSL 3.0 rejects X25519MLKEM768: the new master
  # never starts and B keeps serving.
  cp "$NGINX30" "$d/sbin/nginx.new" && mv -f "$d/sbin/nginx.new" "$d/sbin/nginx"
  echo "naive rollback: Debian's nginx back in place, USR2 to master $b at 2 s"
  "$PQWATCH" loadgen -target "127.0.0.1:$port" -sni localhost -insecure -arm hybrid=X25519MLKEM768,x25519 \
    -rate "$SWAP_RATE" -duration 8 -warmup 1 -trials 1 -scenario swap -server-pid "$b" -scenario-at 2,4,6 \
    -max-send-lag -1ms -out "$dir/rollback" >"$dir/rollback.md" 2>"$dir/rollback.err" ||
    echo "  loadgen exit $? (a failed scenario exits 1)"
  jq -r '.scenarios[] | "  scenario \(.kind): \(.status): \(.detail)"' "$dir/rollback/results.json"
  sleep 4
  kill -INT "$agent"
  wait "$agent" || true
  echo "pqwatch's swap events:"
  grep 'msg="swap event"' "$dir/pqwatch.log" | sed 's/^/  /'
  grep '\[emerg\]' "$d/error.log" | sed 's/^/  error.log: /' | head -n 3
  # Per generation, from pqwatch's records; against the clients' groups.
  {
    echo "| generation | TLS library | handshakes | X25519MLKEM768 | x25519 | PQ share | first seen | last seen |"
    echo "|---|---|--:|--:|--:|--:|---|---|"
    jq -rs 'map(select(.generation != null)) | group_by(.generation.id) | sort_by(.[0].ts)[]
      | (length) as $n | (map(select(.group == "X25519MLKEM768")) | length) as $pq
      | "| \(.[0].generation.id) | \(.[0].generation.openssl // "") | \($n) | \($pq) | \(map(select(.group == "x25519")) | length) | \(($pq * 1000 / $n | round) / 10)% | \(map(.ts) | min) | \(map(.ts) | max) |"' \
      "$dir/records.jsonl"
  } >"$dir/generations.md"
  {
    echo "| run | requests OK | X25519MLKEM768 | x25519 | failed |"
    echo "|---|--:|--:|--:|--:|"
    for r in loadgen rollback; do
      awk -F, -v r=$r 'NR > 1 { if ($13 == "200") { ok++; g[$10]++ } else bad++ }
        END { printf "| %s | %d | %d | %d | %d |\n", r, ok, g["X25519MLKEM768"], g["x25519"], bad }' "$dir/$r/requests.csv"
    done
  } >"$dir/clients.md"
  echo "records: $(wc -l <"$dir/records.jsonl"), with a generation: $(jq -s 'map(select(.generation != null)) | length' "$dir/records.jsonl")"
  cat "$dir/generations.md" "$dir/clients.md"
  (cd "$REPO" && go run ./internal/genchart -records "$dir/records.jsonl" -loadgen "$dir/loadgen/results.json" \
    -loadgen "$dir/rollback/results.json" -agent-log "$dir/pqwatch.log" -o "$dir/generations.svg")
  echo "chart: $dir/generations.svg"
  nginx_stop "$b"
  pids=()
}

# --- bytes: OpenSSL 3.5's s_client against Caddy, captured, analysed.
study_bytes() {
  need "$OPENSSL35" "make openssl35"
  need "$CADDY" "go install github.com/caddyserver/caddy/v2/cmd/caddy@latest"
  local dir=$OUT/bytes port=$((PORT_BASE + 7)) cap
  rm -rf "$dir"
  mkdir -p "$dir"
  cat >"$dir/Caddyfile" <<EOF
{
	admin off
	auto_https disable_redirects
	storage file_system $dir/caddy
}
https://$SNI:$port {
	tls internal
	respond "ok"
}
EOF
  HOME=$dir XDG_DATA_HOME=$dir XDG_CONFIG_HOME=$dir "$CADDY" run --config "$dir/Caddyfile" --adapter caddyfile >"$dir/caddy.log" 2>&1 &
  local caddy=$!
  pids+=("$caddy")
  local i ready=0
  for i in $(seq 300); do # 30 s: Caddy issues its certificate first
    echo | "$OPENSSL35" s_client -connect "127.0.0.1:$port" -servername "$SNI" >/dev/null 2>&1 && { ready=1; break; }
    kill -0 "$caddy" 2>/dev/null || die "caddy exited: see $dir/caddy.log"
    sleep 0.1
  done
  [ $ready = 1 ] || die "caddy did not complete a handshake on 127.0.0.1:$port within 30 s: see $dir/caddy.log"
  echo "caddy $("$CADDY" build-info 2>/dev/null | awk '$2 == "github.com/caddyserver/caddy/v2" { print $3 }') on 127.0.0.1:$port, client $("$OPENSSL35" version)"
  cap=$dir/handshakes.pcap
  if command -v tcpdump >/dev/null; then
    tcpdump -i lo -w "$cap" -U "tcp port $port" 2>"$dir/capture.log" &
  else
    dumpcap -i lo -w "$cap" -f "tcp port $port" -q 2>"$dir/capture.log" &
  fi
  local capture=$!
  pids+=("$capture")
  sleep 1
  for g in X25519 X25519MLKEM768; do
    echo | "$OPENSSL35" s_client -connect "127.0.0.1:$port" -servername "$SNI" -groups "$g" -msg \
      >"$dir/s_client-$g.txt" 2>&1 || die "s_client -groups $g failed: see $dir/s_client-$g.txt"
    echo "s_client -groups $g: $(grep -m1 'Negotiated TLS1.3 group\|Peer Temp Key\|Server Temp Key' "$dir/s_client-$g.txt" || true)"
    sleep 0.3
  done
  sleep 1
  kill -INT "$capture"
  wait "$capture" || true
  kill "$caddy"
  "$PQWATCH" analyze -format jsonl "$cap" >"$dir/records.jsonl"
  {
    echo "| s_client -groups | negotiated | ClientHello bytes | ServerHello bytes | ClientHello segments |"
    echo "|---|---|--:|--:|--:|"
    jq -r '"| \(.offered_groups // [] | join(",")) | \(.group) | \(.client_hello_bytes) | \(.server_hello_bytes) | \(.client_hello_segments) |"' \
      "$dir/records.jsonl"
  } >"$dir/table.md"
  cat "$dir/table.md"
  echo "s_client -msg says:"
  for g in X25519 X25519MLKEM768; do
    grep -E '^>>> .*ClientHello|^<<< .*ServerHello' "$dir/s_client-$g.txt" | sed "s/^/  $g: /"
  done
  pids=()
}

mkdir -p "$OUT"
echo "migration-study: $(date -u +%FT%TZ) on $(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); output in $OUT"
case "${1:-all}" in
cpu) study_cpu ;;
cpu-table) cpu_tables "$OUT/cpu" && cat "$OUT/cpu/table.md" "$OUT/cpu/trials.md" ;;
swap) study_swap ;;
bytes) study_bytes ;;
all) study_cpu; study_swap; study_bytes ;;
*) die "usage: $0 cpu|swap|bytes|all|cpu-table" ;;
esac
