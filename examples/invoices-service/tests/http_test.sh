#!/usr/bin/env bash
# tests/http_test.sh SERVICE SHARDCTL SQL_DIR — the invoicing service as a
# user sets it up and calls it: three empty databases on the local cluster's
# servers (two shards and a catalog), `shardctl --sql-dir sql init` with only
# this example's migrations, the service over HTTP (curl), the answers
# checked against what was written and against the shards' own rows, a
# bucket moved while tenants keep writing, then `shardctl verify`.
#
# Needs the local cluster ($SHARDKIT_CONFIG, default .cluster/shardkit.toml:
# lab/cluster start); creates and drops invoices_shard0, invoices_shard1 and
# invoices_catalog.
set -euo pipefail

SERVICE=$1
SHARDCTL=$2
SQL_DIR=$3
LAB_CONFIG=${SHARDKIT_CONFIG:?set SHARDKIT_CONFIG to the local cluster configuration (lab/cluster start)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/invoices-test.XXXXXX")
DATABASES=(invoices_shard0 invoices_shard1 invoices_catalog)
SERVICE_PID=""

say() { printf 'http_test: %s\n' "$*"; }
fail() {
  say "FAILED: $*" >&2
  exit 1
}

psql_on() { # port, database, sql
  PGPASSWORD=bookstore psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U bookstore -d "$2" -Atc "$3"
}
# The lab's shard0, shard1 and reference ports, in that order.
mapfile -t PORTS < <(grep -E '^dsn = ' "$LAB_CONFIG" | grep -oE 'port=[0-9]+' | cut -d= -f2 | head -n 3)
((${#PORTS[@]} == 3)) || fail "$LAB_CONFIG does not name shard0, shard1 and the reference server"

drop_databases() {
  local i
  for i in 0 1 2; do
    psql_on "${PORTS[i]}" postgres "DROP DATABASE IF EXISTS ${DATABASES[i]} WITH (FORCE)" 2>/dev/null || true
  done
}
cleanup() {
  local rc=$?
  touch "$WORK/stop"  # the writers, if a failure left them running
  [[ -n $SERVICE_PID ]] && kill "$SERVICE_PID" 2>/dev/null
  wait 2>/dev/null || true
  drop_databases
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

shardctl() { "$SHARDCTL" --config "$WORK/shardkit.toml" --sql-dir "$SQL_DIR" "$@"; }

# call METHOD PATH [JSON]: prints the body; the status goes to $WORK/status.
call() {
  local args=(-sS -o "$WORK/body" -w '%{http_code}' -X "$1" "http://127.0.0.1:$HTTP_PORT$2")
  [[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' -d "$3")
  curl "${args[@]}" >"$WORK/status"
  cat "$WORK/body"
}
status() { cat "$WORK/status"; }
expect_status() { # want, what
  [[ $(status) == "$1" ]] || fail "$2: HTTP $(status) (want $1): $(cat "$WORK/body")"
}

# ---- a cluster from nothing
drop_databases
for i in 0 1 2; do psql_on "${PORTS[i]}" postgres "CREATE DATABASE ${DATABASES[i]}"; done
cat >"$WORK/shardkit.toml" <<TOML
[[shard]]
name = "shard0"
dsn = "host=127.0.0.1 port=${PORTS[0]} dbname=${DATABASES[0]} user=bookstore password=bookstore"
# A move's publication, slot and subscription need a superuser (PostgreSQL 15).
admin_dsn = "host=127.0.0.1 port=${PORTS[0]} dbname=${DATABASES[0]} user=shardkit_admin password=shardkit_admin"

[[shard]]
name = "shard1"
dsn = "host=127.0.0.1 port=${PORTS[1]} dbname=${DATABASES[1]} user=bookstore password=bookstore"
# A move's publication, slot and subscription need a superuser (PostgreSQL 15).
admin_dsn = "host=127.0.0.1 port=${PORTS[1]} dbname=${DATABASES[1]} user=shardkit_admin password=shardkit_admin"

[catalog]
dsn = "host=127.0.0.1 port=${PORTS[2]} dbname=${DATABASES[2]} user=bookstore password=bookstore"

[directory]
source = "catalog"
TOML
say "shardctl --sql-dir sql init"
shardctl init >/dev/null || fail "shardctl init"
shardctl migrate status >/dev/null || fail "migrate status: the servers are not at one version"

"$SERVICE" --config "$WORK/shardkit.toml" --port 0 >"$WORK/service.log" 2>&1 &
SERVICE_PID=$!
for _ in $(seq 100); do
  HTTP_PORT=$(grep -oE 'listening on http://[^ ]+' "$WORK/service.log" | grep -oE '[0-9]+$' || true)
  [[ -n $HTTP_PORT ]] && break
  kill -0 "$SERVICE_PID" 2>/dev/null || fail "the service did not start: $(cat "$WORK/service.log")"
  sleep 0.1
done
[[ -n $HTTP_PORT ]] || fail "the service did not say where it listens"
[[ $(call GET /health | jq -r .status) == ok ]] || fail "health"

# ---- tenants on both shards, ids inside and outside the int32 range
TENANTS=(7 -42 1000 2147483648 5000000001 9223372036854775807 -9223372036854775808 314159265358979)
say "tenants: ${TENANTS[*]}"
n=0
for t in "${TENANTS[@]}"; do
  call POST /tenants "{\"tenant_id\": $t, \"name\": \"tenant $t\", \"plan_id\": $((n % 3 + 1))}" >/dev/null
  expect_status 201 "create tenant $t"
  n=$((n + 1))
done
call POST /tenants '{"tenant_id": 7, "name": "again", "plan_id": 1}' >/dev/null
expect_status 409 "a tenant created twice"
[[ $(call GET /tenants/5000000001 | jq -r '.plan + " " + .monthly_fee') == "team 49.00" ]] ||
  fail "tenant 5000000001 with its plan: $(cat "$WORK/body")"
call GET /tenants/12345 >/dev/null
expect_status 404 "an unknown tenant"
call GET /tenants/abc >/dev/null
expect_status 400 "a tenant id that is not a bigint"

# ---- invoices: three each (amounts 10.10, 20.20, 30.30 times the tenant's rank), the first paid
n=0
for t in "${TENANTS[@]}"; do
  n=$((n + 1))
  for k in 1 2 3; do
    call POST "/tenants/$t/invoices" "{\"customer\": \"customer $k\", \"amount\": \"$((n * k * 1010 / 100)).$(printf '%02d' $((n * k * 1010 % 100)))\"}" >/dev/null
    expect_status 201 "invoice $k of tenant $t"
  done
  first=$(call GET "/tenants/$t/invoices" | jq -r '.[0].invoice_id')
  [[ $(call POST "/tenants/$t/invoices/$first/pay" | jq -r .status) == paid ]] || fail "pay $first"
  call POST "/tenants/$t/invoices/$first/pay" >/dev/null
  expect_status 404 "an invoice paid twice"
done
[[ $(call GET /tenants/2147483648/invoices | jq -r '[.[].amount] | join(",")') == "40.40,80.80,121.20" ]] ||
  fail "tenant 2147483648's invoices: $(cat "$WORK/body")"
call POST /tenants/7/invoices '{"customer": "x", "amount": "-1"}' >/dev/null
expect_status 422 "a negative amount"
call POST /tenants/7/invoices '{"customer": "x", "amount": "lots"}' >/dev/null
expect_status 400 "an amount that is not a number"
call POST /tenants/7/invoices/not-a-uuid/pay >/dev/null
expect_status 400 "an invoice id that is not a uuid"

# ---- the report over both shards against the rows written, and against the shards' own rows
report=$(call GET /report)
expect_status 200 "the report"
# Tenant n (1-based) was billed 60.60 * n in all, 10.10 * n of it paid.
[[ $(jq -c '[.by_status[] | [.status, .invoices, .total]]' <<<"$report") == '[["open","16","1818.00"],["paid","8","363.60"]]' ]] ||
  fail "invoices by status: $report"
[[ $(jq -c '[.top_tenants[] | [.tenant_id, .billed]]' <<<"$report") == '[["314159265358979","484.80"],["-9223372036854775808","424.20"],["9223372036854775807","363.60"],["5000000001","303.00"],["2147483648","242.40"]]' ]] ||
  fail "top tenants: $report"
[[ $(jq -c '[.by_plan[] | [.plan, .tenants]]' <<<"$report") == '[["enterprise","2"],["free","3"],["team","3"]]' ]] ||
  fail "tenants by plan: $report"
on0=$(psql_on "${PORTS[0]}" "${DATABASES[0]}" "SELECT count(*) FROM invoices")
on1=$(psql_on "${PORTS[1]}" "${DATABASES[1]}" "SELECT count(*) FROM invoices")
((on0 > 0 && on1 > 0 && on0 + on1 == 24)) || fail "the invoices are not spread over both shards: $on0 + $on1"
shardctl verify >/dev/null || fail "shardctl verify after the writes"

# ---- a bucket moved while its tenant and the others keep writing
mover=5000000001
where=$(shardctl --json route --type bigint "$mover")
bucket=$(jq -r '.[0].bucket' <<<"$where")
from=$(jq -r '.[0].shard' <<<"$where")
[[ $(psql_on "${PORTS[0]}" "${DATABASES[0]}" "SELECT bucket_of_bigint($mover)") == "$bucket" ]] ||
  fail "shardctl route and bucket_of_bigint disagree on tenant $mover: $where"
to=$((1 - from))
say "moving bucket $bucket (tenant $mover) from shard $from to shard $to under load"
writer() { # tenant: posts invoices until the move is over (at least 20, at most 5000), one line per answer
  local k=0
  while { [[ ! -e $WORK/moved ]] || ((k < 20)); } && ((k < 5000)) && [[ ! -e $WORK/stop ]]; do
    k=$((k + 1))
    curl -sS -o /dev/null -w '%{http_code}\n' -X POST -H 'Content-Type: application/json' \
      -d "{\"customer\": \"load $k\", \"amount\": \"1.00\"}" "http://127.0.0.1:$HTTP_PORT/tenants/$1/invoices" || echo curl-failed
  done >"$WORK/load.$1"
}
writer "$mover" &
w1=$!
writer 7 &
w2=$!
shardctl move "$bucket" --to "$to" >"$WORK/move.log" 2>&1 || fail "shardctl move: $(cat "$WORK/move.log")"
touch "$WORK/moved"
wait "$w1" "$w2"
for t in "$mover" 7; do
  ok=$(grep -c '^201$' "$WORK/load.$t" || true)
  total=$(wc -l <"$WORK/load.$t")
  ((ok == total)) || fail "tenant $t: $((total - ok)) of $total writes failed during the move: $(sort "$WORK/load.$t" | uniq -c | tr '\n' ' ')"
  listed=$(call GET "/tenants/$t/invoices" | jq length)
  ((listed == total + 3)) || fail "tenant $t lists $listed invoices, wrote $((total + 3))"
  say "tenant $t: $total writes during the move, all acknowledged and listed"
done
[[ $(psql_on "${PORTS[to]}" "${DATABASES[to]}" "SELECT count(*) FROM invoices WHERE tenant_id = $mover") == $(call GET "/tenants/$mover/invoices" | jq length) ]] ||
  fail "tenant $mover's invoices are not all on shard $to"
[[ $(call GET /tenants/$mover | jq -r .name) == "tenant $mover" ]] || fail "tenant $mover after the move"
shardctl verify >/dev/null || fail "shardctl verify after the move: $(shardctl verify 2>&1 | tail -5)"

kill -TERM "$SERVICE_PID"
wait "$SERVICE_PID" || fail "the service exited $? on SIGTERM"
SERVICE_PID=""
say "passed"
