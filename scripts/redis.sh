#!/usr/bin/env bash
# Start or stop a throw-away Redis server for the Pulsar IO tests, from Debian's `redis-server`.
#   scripts/redis.sh start DIR PORT   -> installs the package if missing (needs root + apt-get),
#                                        starts a server on 127.0.0.1:PORT with its files in DIR,
#                                        waits until it answers PONG; exit 1 if it cannot.
#   scripts/redis.sh stop DIR
set -uo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}; port=${3:-6379}

case "$cmd" in start|stop) ;; *) echo "usage: $0 start|stop DIR [PORT]" >&2; exit 2 ;; esac

if [ "$cmd" = stop ]; then
    if [ -f "$dir/redis.pid" ]; then
        pid=$(cat "$dir/redis.pid")
        kill "$pid" 2>/dev/null
        for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
    exit 0
fi

if ! command -v redis-server >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing Debian's redis-server package for the Pulsar IO tests..."
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null 2>&1
    fi
    command -v redis-server >/dev/null || { echo "redis-server not available: its tests will be skipped"; exit 1; }
fi

mkdir -p "$dir"
cat > "$dir/redis.conf" <<CFG
bind 127.0.0.1
port $port
daemonize yes
pidfile $dir/redis.pid
logfile $dir/redis.log
dir $dir
save ""
appendonly no
protected-mode yes
CFG
redis-server "$dir/redis.conf" >/dev/null 2>&1
for _ in $(seq 60); do
    if python3 - "$port" <<'PY' 2>/dev/null
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)
s.sendall(b"PING\r\n")
sys.exit(0 if s.recv(7).startswith(b"+PONG") else 1)
PY
    then
        echo "redis ready on 127.0.0.1:$port"
        exit 0
    fi
    sleep 0.5
done
echo "redis did not start (see $dir/redis.log): its tests will be skipped"
exit 1
