#!/usr/bin/env bash
# Start or stop a throw-away PostgreSQL server for the Pulsar IO tests, from Debian's `postgresql`.
#   scripts/postgres.sh start DIR PORT   -> installs the package if missing (needs root + apt-get),
#                                           initdb's a cluster in DIR/data (as the `postgres` user
#                                           when run as root: PostgreSQL refuses to run as root),
#                                           wal_level=logical, listening on 127.0.0.1:PORT only,
#                                           superuser `postgres` with password `pulsar` over TCP;
#                                           waits until it accepts connections; exit 1 if it cannot.
#   scripts/postgres.sh stop DIR
set -uo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}; port=${3:-5432}
password=${PULSAR_TEST_PG_PASSWORD:-pulsar}

case "$cmd" in start|stop) ;; *) echo "usage: $0 start|stop DIR [PORT]" >&2; exit 2 ;; esac

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bin=$(bindir)
if [ "$cmd" = stop ]; then
    [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1
    exit 0
fi

if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing Debian's postgresql package for the Pulsar IO tests..."
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null 2>&1
    fi
    bin=$(bindir)
    [ -n "$bin" ] && [ -x "$bin/initdb" ] || { echo "postgresql not available: its tests will be skipped"; exit 1; }
fi

mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { echo "no postgres user: its tests will be skipped"; exit 1; }
    chown postgres "$dir"
    runuser -u postgres -- test -w "$dir" \
        || { echo "user postgres cannot reach $dir (a parent is not searchable): its tests will be skipped"; exit 1; }
fi
if [ ! -f "$dir/data/PG_VERSION" ]; then
    printf '%s\n' "$password" > "$dir/pwfile"
    [ "$(id -u)" = 0 ] && chown postgres "$dir/pwfile"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { echo "initdb failed (see $dir/initdb.log): its tests will be skipped"; exit 1; }
    rm -f "$dir/pwfile"
fi
as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 30 start \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_replication_slots=32 -c max_wal_senders=16 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    >/dev/null 2>&1
for _ in $(seq 60); do
    if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
        echo "postgresql ready on 127.0.0.1:$port"
        exit 0
    fi
    sleep 0.5
done
echo "postgresql did not start (see $dir/postgres.log): its tests will be skipped"
exit 1
