#!/usr/bin/env bash
# Measures this API and five registry peers with `charges conformance`, side
# by side (docs/conformance.md, "This API and five peers"). Each peer is a
# minimal app in this folder, written as its package's README shows, with
# its versions pinned; each is installed into a work folder, started on
# loopback twice (WORK_MS=0 and WORK_MS=50: each charge waiting 50 ms first,
# as a database would) and checked with --json. Then the table.
#
#   docs/conformance/peers.sh [WORK_DIR]
#   CHARGES_BIN=/path/to/charges docs/conformance/peers.sh [WORK_DIR]
#
# The checker and this API are one binary: CHARGES_BIN if set (a release
# build, an installed one), else the debug one it builds here with
# `cargo build` (CARGO_TARGET_DIR honoured), saying so on stderr.
#
# Not run in CI: it installs from npm and PyPI. Needs node/npm and python3
# (with venv). Every install, server and run is bounded in time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -n "${CHARGES_BIN:-}" ]; then
  bin="$CHARGES_BIN"
  [ -x "$bin" ] || { echo "peers.sh: CHARGES_BIN=$bin is not an executable file" >&2; exit 1; }
  echo "peers.sh: using CHARGES_BIN=$bin" >&2
else
  target="${CARGO_TARGET_DIR:-$root/target}"
  echo "peers.sh: building the debug binary (cargo build --locked; set CHARGES_BIN to use a built one)" >&2
  (cd "$root" && cargo build --locked --quiet)
  bin="$target/debug/charges"
fi
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
  for _ in $(seq 150); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

install() { # name
  local dir="$work/peer-$1"
  [ -e "$dir/.installed" ] && return 0
  rm -rf "$dir" && cp -r "$here/peer-$1" "$dir"
  if [ -e "$dir/package.json" ]; then
    (cd "$dir" && timeout 600 npm ci --no-audit --no-fund --silent)
  else
    python3 -m venv "$dir/.venv"
    timeout 600 "$dir/.venv/bin/pip" install -q -r "$dir/requirements.txt"
  fi
  touch "$dir/.installed"
}

start() { # name port work_ms
  local dir="$work/peer-$1" log="$work/$1-$3ms.log"
  # One subshell that becomes `timeout` (exec): killing $! stops the server.
  (
    cd "$dir"
    export PORT="$2" WORK_MS="$3"
    case "$1" in
      express | nest) exec timeout 900 node server.js ;;
      fastapi | asgi) exec timeout 900 .venv/bin/uvicorn app:app --host 127.0.0.1 --port "$2" \
        --log-level warning ;;
      django) exec timeout 900 .venv/bin/python app.py runserver "127.0.0.1:$2" --noreload ;;
    esac
  ) >"$log" 2>&1 &
  pids+=($!)
}

check() { # label port [credential args...]
  local label="$1" port="$2"
  shift 2
  local code=0
  timeout 600 "$bin" conformance "http://127.0.0.1:$port/charges" "$@" \
    --other-endpoint '/charges/{id}/refunds' --other-endpoint-body '{"amount":100}' \
    --json >"$work/$label.json" 2>"$work/$label.err" || code=$?
  echo "$code" >"$work/$label.code"
  echo "== $label: exit $code" >&2
}

peer_args=(-H 'Authorization: Bearer one' --second-credential 'Authorization: Bearer two'
  --read-url /charges)
for peer in express fastapi asgi django nest; do
  install "$peer"
  for ms in 0 50; do
    port="$(free_port)"
    start "$peer" "$port" "$ms"
    wait_port "$port" || { echo "$peer did not start:" >&2; cat "$work/$peer-${ms}ms.log" >&2; exit 1; }
    check "$peer-$ms" "$port" "${peer_args[@]}"
    kill "${pids[-1]}" 2>/dev/null || true
    wait "${pids[-1]}" 2>/dev/null || true
  done
done

# This API, as .ci/conformance runs it (SQLite here).
for mode in atomic key-first; do
  url="sqlite://$work/charges-$mode.db"
  rm -f "$work/charges-$mode.db"*
  alice="$(DATABASE_URL="$url" "$bin" account create alice | tail -n 1)"
  bob="$(DATABASE_URL="$url" "$bin" account create bob | tail -n 1)"
  port="$(free_port)"
  DATABASE_URL="$url" BIND="127.0.0.1:$port" DEMO=false IDEMPOTENCY_MODE="$mode" METRICS_BIND=off \
    timeout 900 "$bin" serve >"$work/charges-$mode.log" 2>&1 &
  pids+=($!)
  wait_port "$port" || { echo "charges did not start:" >&2; cat "$work/charges-$mode.log" >&2; exit 1; }
  check "charges-$mode" "$port" -H "Authorization: Bearer $alice" \
    --second-credential "Authorization: Bearer $bob" --read-url '/charges?limit=100'
  kill "${pids[-1]}" 2>/dev/null || true
  wait "${pids[-1]}" 2>/dev/null || true
done

{
  echo "Measured $(date -u +%Y-%m-%d) with $("$bin" --version 2>/dev/null || echo charges) at $(cd "$root" && git rev-parse --short HEAD)."
  echo
  for peer in express nest; do
    (cd "$work/peer-$peer" && npm ls --depth=0 2>/dev/null | tail -n +2 | sed "s/^/    $peer: /")
  done
  for peer in fastapi asgi django; do
    "$work/peer-$peer/.venv/bin/pip" freeze | sed "s/^/    $peer: /"
  done
  echo
  python3 "$here/peers_table.py" "$work"
} | tee "$work/table.md"
