#!/usr/bin/env bash
# Throwaway database servers for the tests: PostgreSQL 15, MariaDB and Redis on loopback, data
# in a directory of their own, fsync off for the SQL servers (tests only). Recipes measured on
# Debian 12.
#
#   scripts/db.sh pg-init DIR PORT   initdb + start + role `app` / database `appdb`
#   scripts/db.sh pg-start DIR       start again (after pg-stop)
#   scripts/db.sh pg-stop DIR        stop (fast shutdown)
#   scripts/db.sh pg-standby-init PRIMARY DIR PORT [FROM]  a streaming standby of PRIMARY (a
#                                    DIR), streaming through port FROM if given (a proxy)
#   scripts/db.sh pg-kill DIR        SIGKILL the server and its backends (a crashed machine)
#   scripts/db.sh pg-promote DIR     promote a standby to primary
#   scripts/db.sh my-init DIR PORT   mariadb-install-db + start + user `app` / database `appdb`
#   scripts/db.sh my-start DIR
#   scripts/db.sh my-stop DIR
#   scripts/db.sh redis-init DIR PORT  start redis-server (append-only file, fsync per write)
#   scripts/db.sh redis-start DIR
#   scripts/db.sh redis-stop DIR
#   scripts/db.sh redis-cluster-init DIR  a Redis Cluster: 3 masters with 1 replica each, in
#                                    DIR/node1..6 (same persistence); prints the first port
#   scripts/db.sh redis-cluster-stop DIR
#   scripts/db.sh galera-init DIR    a MariaDB Galera cluster of 3 nodes (multi-primary), in
#                                    DIR/node1..3, user `app` / database `appdb` replicated to
#                                    all; prints the three client ports
#   scripts/db.sh galera-stop DIR
#   scripts/db.sh galera-kill DIR N  SIGKILL node N (a crashed machine)
#   scripts/db.sh galera-stop-node DIR N
#   scripts/db.sh galera-restart DIR N  start node N again (by IST), until the cluster has 3
#   scripts/db.sh galera-isolate DIR N on|off  split node N from the others (non-primary)
#   scripts/db.sh galera-wait DIR N SIZE  until node N is Synced in a primary of SIZE nodes
#   scripts/db.sh galera-wait-non-primary DIR N  until node N has left the primary component
#   scripts/db.sh free-port          print a free loopback TCP port
#
# URLs: postgres://app:app@127.0.0.1:PORT/appdb, mysql://app:app@127.0.0.1:PORT/appdb and
# redis://127.0.0.1:PORT/0
# Environment: INNODB_BUFFER_POOL (MariaDB's innodb_buffer_pool_size, 128M by default);
# PG_DURABLE=1 at pg-init keeps fsync and synchronous_commit on (the failover tests).
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
  local dir=$1 port fast="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  port=$(cat "$dir/port")
  # A durable server (PG_DURABLE=1 at init) keeps PostgreSQL's own durability settings.
  [ -f "$dir/durable" ] && fast=""
  # PG_OPTS: more settings, e.g. "-c shared_preload_libraries=pg_stat_statements".
  as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t 30 -o \
    "-c listen_addresses=127.0.0.1 -p $port -k $dir $fast -c max_connections=300 ${PG_OPTS:-}" \
    start >/dev/null
}

# A streaming standby of the primary in $1, in $2 on port $3: a base backup with the
# replication settings written (`-R`), started in recovery; with $4, it streams from that port
# (a proxy in front of the primary) instead of the primary's.
pg_standby_init() {
  local primary=$1 dir=$2 port=$3 from=${4:-} primary_port
  primary_port=$(cat "$primary/port")
  mkdir -p "$dir"; echo "$port" >"$dir/port"
  [ -f "$primary/durable" ] && touch "$dir/durable"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  as_postgres "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres \
    -D "$dir/data" -R -X stream -c fast >"$dir/basebackup.log" 2>&1 \
    || { cat "$dir/basebackup.log" >&2; exit 1; }
  if [ -n "$from" ]; then
    sed -i "s/ port=$primary_port / port=$from /" "$dir/data/postgresql.auto.conf"
  fi
  pg_start "$dir"
}

# The server in $1 dies as its machine would: SIGKILL to the postmaster and every backend.
pg_kill() {
  local dir=$1 pid
  [ -f "$dir/data/postmaster.pid" ] || return 0
  pid=$(head -1 "$dir/data/postmaster.pid")
  kill -STOP "$pid" 2>/dev/null || true
  pkill -KILL -P "$pid" 2>/dev/null || true
  kill -KILL "$pid" 2>/dev/null || true
}

pg_stop() {
  local dir=$1
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null || true
  fi
}

my_start() {
  local dir=$1 port user=()
  port=$(cat "$dir/port")
  [ "$(id -u)" = 0 ] && user=(--user=root)
  setsid mariadbd --no-defaults "${user[@]}" --datadir="$dir/data" --bind-address=127.0.0.1 \
    --port="$port" --socket="$dir/mysql.sock" --pid-file="$dir/mysqld.pid" \
    --log-error="$dir/error.log" --skip-log-bin --innodb-flush-log-at-trx-commit=0 \
    --innodb-buffer-pool-size="${INNODB_BUFFER_POOL:-128M}" --skip-name-resolve --max-connections=400 \
    </dev/null >"$dir/out.log" 2>&1 &
  for _ in $(seq 1 600); do
    if mariadb-admin --no-defaults --socket="$dir/mysql.sock" -uroot ping >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.05
  done
  echo "mariadbd did not start; see $dir/error.log" >&2
  tail -20 "$dir/error.log" >&2 || true
  return 1
}

my_stop() {
  local dir=$1 pid
  [ -f "$dir/mysqld.pid" ] || return 0
  pid=$(cat "$dir/mysqld.pid")
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# Redis with the persistence the Redis store's guarantees need (docs/storage.md, "Redis / Valkey"): an
# append-only file written and fsynced before every acknowledgement, and no eviction.
# REDIS_APPENDFSYNC=everysec measures the weaker setting (benchmarks only).
redis_start() {
  local dir=$1 port
  shift
  port=$(cat "$dir/port")
  # Extra options (a cluster node's) are kept for a restart by redis-start.
  [ $# -gt 0 ] && printf '%s\n' "$@" >"$dir/options"
  local extra=()
  [ -f "$dir/options" ] && mapfile -t extra <"$dir/options"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --appendonly yes \
    --appendfsync "${REDIS_APPENDFSYNC:-always}" --maxmemory-policy noeviction --save '' \
    "${extra[@]}" >/dev/null
  for _ in $(seq 1 600); do
    if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
      return 0
    fi
    sleep 0.05
  done
  echo "redis-server did not start; see $dir/redis.log" >&2
  tail -20 "$dir/redis.log" >&2 || true
  return 1
}

redis_stop() {
  local dir=$1 pid
  [ -f "$dir/redis.pid" ] || return 0
  pid=$(cat "$dir/redis.pid")
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# A Redis Cluster on loopback: six nodes with the persistence above, a node timeout of 2 s (a
# failed master is replaced by its replica within seconds) and no diskless-sync delay (a
# replica syncs at once), created by `redis-cli --cluster create` as 3 masters with 1 replica
# each. Returns once every slot is served and every replica is in sync with its master, so
# that `WAIT 1` succeeds from the first command.
redis_cluster_init() {
  local dir=$1 ports=() i port
  mkdir -p "$dir"
  for i in 1 2 3 4 5 6; do
    mkdir -p "$dir/node$i"
    port=$(free_port); echo "$port" >"$dir/node$i/port"
    ports+=("127.0.0.1:$port")
    redis_start "$dir/node$i" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 --cluster-port "$(free_port)" --repl-diskless-sync-delay 0
  done
  redis-cli --cluster create "${ports[@]}" --cluster-replicas 1 --cluster-yes     >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; return 1; }
  for _ in $(seq 1 600); do
    local ok=1
    for i in 1 2 3 4 5 6; do
      port=$(cat "$dir/node$i/port")
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
      if redis-cli -p "$port" info replication 2>/dev/null | grep -q '^role:slave'; then
        redis-cli -p "$port" info replication | grep -q '^master_link_status:up' || ok=0
      fi
    done
    [ $ok = 1 ] && { cat "$dir/node1/port"; return 0; }
    sleep 0.1
  done
  echo "the Redis Cluster did not settle; see $dir/node*/redis.log" >&2
  return 1
}

# Throwaway nodes: SIGKILL, for a master with a replica would otherwise wait up to
# `shutdown-timeout` (10 s) for it to catch up. A killed process has released its ports and
# files by the time it is a zombie, so there is nothing to wait for.
redis_cluster_stop() {
  local dir=$1 node
  for node in "$dir"/node*; do
    [ -f "$node/redis.pid" ] && kill -KILL "$(cat "$node/redis.pid")" 2>/dev/null
  done
  return 0
}

# A 3-node MariaDB Galera cluster on loopback (the recipe measured on Debian 12 with MariaDB
# 10.11 and galera-4 26.4): node 1 is bootstrapped and stopped once, its datadir (with the
# cluster's UUID and seqno in grastate.dat) copied to nodes 2 and 3, which then join by
# incremental state transfer (IST), one at a time: 5-7 s from nothing to three nodes Synced,
# where a full state transfer (SST, mariabackup) would take 12 s per joiner. The SST method is
# mariabackup all the same (rsync's daemon drops to `nobody` and fails as root), for a node that
# cannot join by IST. A node killed is restarted through --wsrep-recover, which finds its
# position in InnoDB, so that it rejoins by IST too. The group communication timeouts are
# Galera's defaults: shortened, the survivors of a kill went non-primary.
GALERA_PROVIDER=${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}

galera_cnf() {
  local dir=$1 n=$2 gcomm=$3 d=$1/node$2 user=""
  [ "$(id -u)" = 0 ] && user="user=root"
  mkdir -p "$d/data" "$d/tmp"
  cat >"$d/my.cnf" <<CNF
[client]
socket=$d/mysql.sock
user=root
[mysqld]
$user
datadir=$d/data
tmpdir=$d/tmp
socket=$d/mysql.sock
pid-file=$d/mariadbd.pid
log-error=$d/error.log
port=$(cat "$d/port")
# Each node its own: UUID_SHORT(), the default of the records' claim_id, starts from it.
server_id=$n
bind-address=127.0.0.1
skip-name-resolve
max-connections=400
innodb_buffer_pool_size=64M
innodb_log_file_size=48M
innodb_flush_log_at_trx_commit=0
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=$GALERA_PROVIDER
wsrep_cluster_name=idem
wsrep_cluster_address=$gcomm
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$(cat "$d/gcomm_port")
wsrep_node_incoming_address=127.0.0.1:$(cat "$d/port")
wsrep_sst_method=mariabackup
wsrep_sst_receive_address=127.0.0.1:$(cat "$d/sst_port")
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$(cat "$d/gcomm_port");ist.recv_addr=127.0.0.1:$(cat "$d/ist_port");gcache.size=64M"
[sst]
sst-log-archive=0
CNF
}

# Starts node N of the cluster in DIR (extra mariadbd options after it), in the background.
galera_start() {
  local d=$1/node$2
  shift 2
  setsid mariadbd --defaults-file="$d/my.cnf" "$@" </dev/null >>"$d/out.log" 2>&1 &
  echo $! >"$d/pid"
}

galera_sql() {
  mariadb --defaults-file="$1/node$2/my.cnf" -N -B -e "$3"
}

# Waits until node N is Synced, ready, in a primary component of SIZE nodes.
galera_wait() {
  local dir=$1 n=$2 size=$3 out
  for _ in $(seq 1 600); do
    out=$(galera_sql "$dir" "$n" "SHOW GLOBAL STATUS WHERE Variable_name IN
      ('wsrep_cluster_size', 'wsrep_ready', 'wsrep_local_state_comment')" 2>/dev/null |
      sort | awk '{ printf "%s ", $2 }') || out="not answering"
    [ "$out" = "$size Synced ON " ] && return 0
    if ! kill -0 "$(cat "$dir/node$n/pid")" 2>/dev/null; then
      echo "Galera node $n died; see $dir/node$n/error.log" >&2
      tail -20 "$dir/node$n/error.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
  echo "Galera node $n did not reach $size nodes Synced ($out); see $dir/node$n/error.log" >&2
  return 1
}

galera_stop_node() {
  local pid
  pid=$(cat "$1/node$2/pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
}

galera_init() {
  local dir=$1 n gcomm="" user=()
  [ "$(id -u)" = 0 ] && user=(--user=root)
  for n in 1 2 3; do
    mkdir -p "$dir/node$n"
    for p in port gcomm_port ist_port sst_port; do free_port >"$dir/node$n/$p"; done
    gcomm="$gcomm${gcomm:+,}127.0.0.1:$(cat "$dir/node$n/gcomm_port")"
  done
  for n in 1 2 3; do galera_cnf "$dir" "$n" "gcomm://$gcomm"; done
  mariadb-install-db --defaults-file="$dir/node1/my.cnf" "${user[@]}" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
    || { cat "$dir/install.log" >&2; return 1; }
  galera_start "$dir" 1 --wsrep-new-cluster
  galera_wait "$dir" 1 1
  galera_sql "$dir" 1 "CREATE DATABASE appdb;
    CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app';
    GRANT ALL PRIVILEGES ON *.* TO 'app'@'127.0.0.1';"
  galera_stop_node "$dir" 1
  for n in 2 3; do rm -rf "$dir/node$n/data"; cp -a "$dir/node1/data" "$dir/node$n/data"; done
  galera_start "$dir" 1 --wsrep-new-cluster
  galera_wait "$dir" 1 1
  # One at a time: two joiners at once take longer than two joins in a row.
  galera_start "$dir" 2 && galera_wait "$dir" 2 2
  galera_start "$dir" 3 && galera_wait "$dir" 3 3
  echo "$(cat "$dir/node1/port") $(cat "$dir/node2/port") $(cat "$dir/node3/port")"
}

# Restarts node N after galera-kill (or galera-stop-node), from the position InnoDB recovered,
# so that it rejoins by IST; waits until the cluster has its three nodes again.
galera_restart() {
  local dir=$1 n=$2 d=$1/node$2 pos pid
  # Still serving (a restart that timed out, a kill that failed): wait for it, do not start a
  # second server on its data directory.
  if galera_sql "$dir" "$n" "SELECT 1" >/dev/null 2>&1; then
    galera_wait "$dir" "$n" 3
    return
  fi
  # A killed server may take a moment to be gone, and its files with it.
  pid=$(cat "$d/pid" 2>/dev/null || true)
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  # Its own log each time: an earlier recovery's position must not be read as this one's.
  rm -f "$d/recover.log"
  mariadbd --defaults-file="$d/my.cnf" --wsrep-recover --log-error="$d/recover.log" \
    >/dev/null 2>&1 || true
  pos=$(sed -n 's/.*WSREP: Recovered position: //p' "$d/recover.log" | tail -1)
  galera_start "$dir" "$n" ${pos:+--wsrep-start-position=$pos}
  galera_wait "$dir" "$n" 3
}

galera_stop() {
  local dir=$1 n pid
  for n in 1 2 3; do
    pid=$(cat "$dir/node$n/pid" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null || true
  done
  for n in 1 2 3; do galera_stop_node "$dir" "$n"; done
  return 0
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cmd=${1:?usage: scripts/db.sh pg-init|pg-start|pg-stop|my-init|my-start|my-stop|redis-init|redis-start|redis-stop|redis-cluster-init|redis-cluster-stop|free-port ...}
case "$cmd" in
  free-port) free_port ;;
  pg-init)
    dir=$2; port=$3
    mkdir -p "$dir"; echo "$port" >"$dir/port"
    [ "${PG_DURABLE:-}" = 1 ] && touch "$dir/durable"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 \
      --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    pg_start "$dir"
    "$PGBIN/psql" -q "postgresql://postgres@127.0.0.1:$port/postgres" -v ON_ERROR_STOP=1 \
      -c "create role app login createdb password 'app'" -c "create database appdb owner app" >/dev/null
    ;;
  pg-start) pg_start "$2" ;;
  pg-stop) pg_stop "$2" ;;
  pg-standby-init) pg_standby_init "$2" "$3" "$4" "${5:-}" ;;
  pg-kill) pg_kill "$2" ;;
  pg-promote) as_postgres "$PGBIN/pg_ctl" -D "$2/data" -w -t 30 promote >/dev/null ;;
  my-init)
    dir=$2; port=$3
    mkdir -p "$dir"; echo "$port" >"$dir/port"
    user=(); [ "$(id -u)" = 0 ] && user=(--user=root)
    mariadb-install-db --no-defaults "${user[@]}" --datadir="$dir/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
      || { cat "$dir/install.log" >&2; exit 1; }
    my_start "$dir"
    mariadb --no-defaults --socket="$dir/mysql.sock" -uroot -e "CREATE DATABASE appdb;
      CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app';
      GRANT ALL PRIVILEGES ON *.* TO 'app'@'127.0.0.1';"
    ;;
  my-start) my_start "$2" ;;
  my-stop) my_stop "$2" ;;
  redis-init)
    dir=$2; port=$3
    mkdir -p "$dir"; echo "$port" >"$dir/port"
    redis_start "$dir"
    ;;
  redis-start) redis_start "$2" ;;
  redis-stop) redis_stop "$2" ;;
  redis-cluster-init) redis_cluster_init "$2" ;;
  redis-cluster-stop) redis_cluster_stop "$2" ;;
  galera-init) galera_init "$2" ;;
  galera-stop) galera_stop "$2" ;;
  galera-kill) kill -KILL "$(cat "$2/node$3/pid")" ;;
  galera-stop-node) galera_stop_node "$2" "$3" ;;
  galera-restart) galera_restart "$2" "$3" ;;
  galera-isolate)
    # Cuts node N off the others' group communication (on) or lets it back (off): isolated,
    # it turns non-primary and refuses reads and writes (1047).
    galera_sql "$2" "$3" "SET GLOBAL wsrep_provider_options='gmcast.isolate=$([ "$4" = on ] && echo 1 || echo 0)'"
    ;;
  galera-wait) galera_wait "$2" "$3" "$4" ;;
  galera-wait-non-primary)
    # Until node N has left the primary component (about 6 s after it is cut off).
    for _ in $(seq 1 600); do
      [ "$(galera_sql "$2" "$3" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
        WHERE VARIABLE_NAME = 'WSREP_CLUSTER_STATUS'" 2>/dev/null)" = non-Primary ] && exit 0
      sleep 0.1
    done
    echo "Galera node $3 is still in the primary component" >&2
    exit 1
    ;;
  *) echo "unknown command: $cmd" >&2; exit 2 ;;
esac
