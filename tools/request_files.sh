#!/usr/bin/env bash
# request_files.sh: how many of this repository's source files one keyed
# `POST /charges` executes (issue #49: "a keyed POST /charges touches fewer
# files than today (say how many)").
#
# What it counts: the files under src/ and crates/idempotency/src/ with at
# least one instruction executed (callgrind's Ir > 0) while the server
# handles ONE `POST /charges` with an Idempotency-Key header, the key's first
# request (201), after startup and after a warm-up request with another key
# (so lazy one-time initialisation is not counted).
#
# How: a fresh PostgreSQL database (dropped at the end, with the in-process
# network's `<database>_network` if one was made), an account made with
# `charges account create`, then `charges serve` on 127.0.0.1:0 under
#   valgrind --tool=callgrind --dump-instr=no --collect-atstart=yes
# Once /healthz answers: one warm-up keyed POST /charges, `callgrind_control
# -z` (zero), the measured keyed POST /charges (checked 201), SETTLE seconds
# for the work after the response, `callgrind_control -d` (dump). Then an
# idle window of the same length (zero, sleep, dump, no request): the files
# background tasks alone touch. Each dump (written uncompressed:
# --compress-strings=no --compress-pos=no) is read directly: the self cost
# of each cost line goes to the current source file (fl=, or fi=/fe= for
# inlined code), the line after a calls= (the call's inclusive cost) is
# skipped. Costs at line 0 are left out and listed apart: rustc gives the
# instructions it generates with no source line (in a generic of another
# crate instantiated here, say serde_json's) to the crate's root file, so
# counting them would add src/lib.rs, src/main.rs or the crate's lib.rs
# whatever runs. (callgrind_annotate --inclusive=no is not used: valgrind
# 3.19's misreads the "calls=0 N " lines of a call begun before the zero,
# and counts the call's inclusive cost as the caller's own, e.g. thousands
# of instructions in charges::main in an idle window.) A debug build
# (`cargo build --bin charges`) inlines little, so a function's instructions
# are counted in the file that defines it; code a derive or macro expands
# counts in the file that invokes it.
#
# Background loops are off by default, so that the window holds the request
# alone: PURGE_INTERVAL=0s, RECOVERY_INTERVAL=0s, WEBHOOK_POLL_INTERVAL=0s,
# METRICS_BIND=off (set any of them in the environment to override). Every
# other setting is serve's default unless set in the environment, e.g.
#   NETWORK_URL=in-process tools/request_files.sh target/debug/charges
# NETWORK_URL=separate (this script's value, not serve's) starts a separate
# `charges network` (SQLite ledger, random merchant key) outside valgrind and
# points serve's NETWORK_URL at it: then only the API's side of the call to
# the network (its client) is counted, not the network's own handling, which
# `in-process` runs in the measured process.
# ACCOUNT_CACHE_TTL defaults here to 1h: the measured request finds its API
# key cached by the warm-up, whatever valgrind's slowness (ACCOUNT_CACHE_TTL=0s
# counts the account look-up in the database too).
#
# Usage: tools/request_files.sh PATH_TO_CHARGES_BINARY [serve args...]
# Environment: SOURCE_ROOT (the checkout the binary was built from; default
# this script's), PG_URL (default postgres://postgres@127.0.0.1:5432),
# BODY (the charge's JSON), SETTLE (seconds, default 3), IDLE (the idle
# window's seconds, default the request window's; the rate limits' forgetter
# ticks every 10 s), KEEP=1 (keep the work directory: dumps, logs).
# Needs valgrind (and its callgrind_control), psql, curl, bc, awk.
# Works on 26ab6d8 (the commit issue #49 measured) too: the same CLI; the
# body has no payment_method, a field 26ab6d8 refuses (8543b33 then charges
# pm_card_visa, its default); WEBHOOK_POLL_INTERVAL is ignored there (no
# webhooks yet). Point SOURCE_ROOT at that checkout.
set -euo pipefail

if [[ $# -lt 1 || ! -x $1 ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
BIN=$(realpath "$1")
shift
ROOT=$(realpath "${SOURCE_ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}")
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432}
SETTLE=${SETTLE:-3}
DB="charges_files_$$_${RANDOM}"
URL="$PG_URL/$DB"
WORK=$(mktemp -d /tmp/request-files.XXXXXX)
PID=
NETWORK_PID=

cleanup() {
    if [[ -n $NETWORK_PID ]]; then kill -TERM "$NETWORK_PID" 2>/dev/null || true; fi
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    psql -q "$PG_URL/postgres" -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" \
        -c "DROP DATABASE IF EXISTS \"${DB}_network\" WITH (FORCE)" >/dev/null 2>&1 || true
    if [[ ${KEEP:-0} == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

psql -q "$PG_URL/postgres" -c "CREATE DATABASE \"$DB\"" >/dev/null
KEY=$("$BIN" account create request-files --database-url "$URL" | tail -n 1)

# ready FILE PREFIX: waits (bounded) for the line "PREFIX http://HOST:PORT..."
# and prints http://HOST:PORT.
ready() {
    local addr
    for _ in $(seq 600); do
        addr=$(sed -n "s|^$2\(http://[^/]*\).*\$|\1|p" "$1" | head -n 1)
        [[ -n $addr ]] && { echo "$addr"; return; }
        sleep 0.5
    done
    echo "no ready line in $1" >&2
    return 1
}

if [[ ${NETWORK_URL:-} == separate ]]; then
    NETWORK_API_KEY=sk_network_$RANDOM$RANDOM$RANDOM
    export NETWORK_API_KEY
    "$BIN" network --bind 127.0.0.1:0 --database-url "sqlite://$WORK/network.db" \
        --api-key "$NETWORK_API_KEY" >"$WORK/network.stdout" 2>"$WORK/network.stderr" &
    NETWORK_PID=$!
    NETWORK_URL=$(ready "$WORK/network.stdout" 'charges network is ready on ')
    export NETWORK_URL
fi

export DATABASE_URL=$URL BIND=127.0.0.1:0 RUST_LOG=${RUST_LOG:-warn}
export PURGE_INTERVAL=${PURGE_INTERVAL:-0s} RECOVERY_INTERVAL=${RECOVERY_INTERVAL:-0s}
export WEBHOOK_POLL_INTERVAL=${WEBHOOK_POLL_INTERVAL:-0s} METRICS_BIND=${METRICS_BIND:-off}
export ACCOUNT_CACHE_TTL=${ACCOUNT_CACHE_TTL:-1h}
valgrind --tool=callgrind --dump-instr=no --collect-atstart=yes \
    --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$WORK/callgrind.out" \
    "$BIN" serve "$@" >"$WORK/stdout" 2>"$WORK/stderr" &
PID=$!

# The ready line names the port; then /healthz must answer.
ADDR=$(ready "$WORK/stdout" 'charges is ready: open ') || { cat "$WORK/stderr" >&2; exit 1; }
until curl -fsS -o /dev/null "$ADDR/healthz"; do sleep 0.5; done
sed -n '1,5p' "$WORK/stdout"

# README's first charge: no payment_method (pm_card_visa then), a field that
# 26ab6d8 does not know.
BODY=${BODY:-'{"amount": 1000, "currency": "jpy", "description": "a book"}'}
charge() { # charge KEY: prints the status
    curl -sS -o "$WORK/response-$1" -w '%{http_code}' "$ADDR/charges" \
        -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -H "Idempotency-Key: \"$1\"" \
        -d "$BODY"
}
expect_201() {
    local status
    status=$(charge "$1")
    if [[ $status != 201 ]]; then
        echo "POST /charges with key $1: $status, not 201" >&2
        cat "$WORK/response-$1" >&2
        exit 1
    fi
}
# Dumps are numbered callgrind.out.1, .2, ...: the newest is the window's.
dump() {
    callgrind_control -d "$1" "$PID" >/dev/null
    ls -v "$WORK"/callgrind.out.* | tail -n 1
}

expect_201 "warm-up-$DB"
callgrind_control -z "$PID" >/dev/null
start=$(date +%s.%N)
expect_201 "measured-$DB"
sleep "$SETTLE"
REQUEST_DUMP=$(dump request)
window=$(echo "$(date +%s.%N) - $start" | bc)

callgrind_control -z "$PID" >/dev/null
sleep "${IDLE:-$window}"
IDLE_DUMP=$(dump idle)
kill -TERM "$PID"
wait "$PID" || true
PID=

# costs DUMP: "Ir_at_lines_>0 Ir_at_line_0 path" for each file of the two
# trees with any cost, paths relative to ROOT.
costs() {
    awk -v root="$ROOT/" '
        /^(fl|fi|fe)=/ { file = substr($0, 4); next }
        /^calls=/ { skip = 1; next }
        /^[0-9]/ {
            if (skip) { skip = 0; next }
            if ($1 > 0) ir[file] += $2; else zero[file] += $2
            seen[file] = 1
        }
        END {
            for (f in seen) {
                r = f; if (index(r, root) == 1) r = substr(r, length(root) + 1)
                if (r ~ /^(src|crates\/idempotency\/src)\//)
                    printf "%d %d %s\n", ir[f], zero[f], r
            }
        }' "$1" | sort -k3
}
report() { # report TITLE DUMP
    local all list
    all=$(costs "$2")
    list=$(echo "$all" | awk '$1 > 0 { print $1, $3 }')
    echo "== $1 ($(basename "$2"), $(grep -m1 '^summary:' "$2") in all)"
    echo "$list" | awk 'NF { printf "  %10d  %s\n", $1, $2 }'
    echo "  counted: src/: $(echo "$list" | grep -c ' src/' || true) files;" \
        "crates/idempotency/src/: $(echo "$list" | grep -c ' crates/idempotency/src/' || true) files"
    echo "  not counted, Ir at line 0 only: $(echo "$all" | awk '$1 == 0 && $2 > 0 { printf "%s (%d) ", $3, $2 }')"
}
echo "request window: ${window}s (settle ${SETTLE}s); idle window: ${IDLE:-$window}s; binary $BIN; sources $ROOT"
report "one keyed POST /charges (201)" "$REQUEST_DUMP"
report "idle window, no request" "$IDLE_DUMP"
