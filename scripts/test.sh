#!/usr/bin/env bash
# Install what the tests need and run the whole suite with trial.
# Prints trial's report, then one closing line "N passed, N failed, N skipped" (what CI reads).
# Extra arguments are passed to trial instead of the default "tests" (e.g. tests.wire).
set -uo pipefail
cd "$(dirname "$0")/.."

# libfuse 3 and fusermount3 for the power-loss filesystem (testing/lazyfs.py); only when missing, only
# where apt-get can run. Without them (or without /dev/fuse) those tests skip, saying why.
if ! command -v fusermount3 >/dev/null 2>&1 || ! ldconfig -p 2>/dev/null | grep 'libfuse3\.so' >/dev/null; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse3-3; } \
            >/dev/null 2>&1 || echo "note: fuse3 could not be installed; the power-loss tests will skip"
    fi
fi

python -m pip install --quiet --disable-pip-version-check '.[test]' || { echo "0 passed, 1 failed"; exit 1; }

# A throw-away ZooKeeper for the metadata-store and cluster tests (skipped when none can be had).
# PostgreSQL and Redis the same way for the Pulsar IO connector tests (PULSAR_TEST_PG, PULSAR_TEST_REDIS).
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
stoppers=()
stop_servers() { for s in "${stoppers[@]}"; do eval "$s"; done; }
trap stop_servers EXIT
# start_server SCRIPT VAR: scripts/SCRIPT.sh on a free port with data in a new directory, VAR set
# to its address, stopped on exit; nothing when VAR is given already or the server cannot start.
start_server() {
    local script=$1 var=$2 dir port
    [ -n "${!var:-}" ] && return 0
    dir=$(mktemp -d)
    [ "$script" = postgres ] && chmod 755 "$dir"   # the postgres user must reach it
    port=$(free_port)
    if bash "scripts/$script.sh" start "$dir" "$port"; then
        export "$var=127.0.0.1:$port"
        stoppers+=("bash scripts/$script.sh stop '$dir'")
    fi
}
start_server zookeeper PULSAR_TEST_ZK
start_server postgres PULSAR_TEST_PG
start_server redis PULSAR_TEST_REDIS

log=$(mktemp)
python -m twisted.trial --temp-directory="${TMPDIR:-/tmp}/pulsar-twisted-trial-$$" "${@:-tests}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

python - "$log" "$status" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
status = int(sys.argv[2])
summary = ""
for line in text.splitlines():
    if line.startswith(("PASSED", "FAILED")):
        summary = line
counts = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", summary))
passed = counts.get("successes", 0) + counts.get("expectedFailures", 0)
failed = counts.get("failures", 0) + counts.get("errors", 0) + counts.get("unexpectedSuccesses", 0)
skipped = counts.get("skips", 0)
if not summary or (status != 0 and failed == 0):
    failed += 1  # trial crashed or printed no summary: never report a green run
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit "$status"
