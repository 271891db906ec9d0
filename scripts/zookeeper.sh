#!/usr/bin/env bash
# Start or stop a throw-away ZooKeeper server for the tests, from Debian's `zookeeper` package.
#   scripts/zookeeper.sh start DIR PORT   -> installs the package if missing (needs root + apt-get),
#                                            starts a server on 127.0.0.1:PORT with data in DIR,
#                                            waits until it answers "imok"; exit 1 if it cannot.
#   scripts/zookeeper.sh stop DIR
set -uo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}; port=${3:-2181}
server=/usr/share/zookeeper/bin/zkServer.sh

case "$cmd" in start|stop) ;; *) echo "usage: $0 start|stop DIR [PORT]" >&2; exit 2 ;; esac

if [ "$cmd" = stop ]; then
    [ -f "$dir/zoo.cfg" ] && "$server" stop "$dir/zoo.cfg" >/dev/null 2>&1
    exit 0
fi

if [ ! -x "$server" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing Debian's zookeeper package for the ZooKeeper tests..."
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper) >/dev/null 2>&1
    fi
    [ -x "$server" ] || { echo "zookeeper not available: its tests will be skipped"; exit 1; }
fi

mkdir -p "$dir/data"
cat > "$dir/zoo.cfg" <<CFG
tickTime=2000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=200
# The admin server would take port 8080, the broker's HTTP port.
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
ZOO_LOG_DIR="$dir" "$server" start "$dir/zoo.cfg" >/dev/null 2>&1
for _ in $(seq 60); do
    if python3 - "$port" <<'PY' 2>/dev/null
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)
s.sendall(b"ruok")
sys.exit(0 if s.recv(4) == b"imok" else 1)
PY
    then
        echo "zookeeper ready on 127.0.0.1:$port"
        exit 0
    fi
    sleep 0.5
done
echo "zookeeper did not start: its tests will be skipped"
exit 1
