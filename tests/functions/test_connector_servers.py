"""
The PostgreSQL and Redis servers the Pulsar IO connector tests run against: ``PULSAR_TEST_PG``
/ ``PULSAR_TEST_REDIS`` (``host:port``, as ``scripts/test.sh`` exports them; PostgreSQL's
superuser ``postgres`` with password ``PULSAR_TEST_PG_PASSWORD``, default ``pulsar``), else one
of each started here with ``scripts/postgres.sh`` / ``scripts/redis.sh`` on a free port, once per
test process (stopped at exit). ``postgres()``/``redis()`` give the address or None, and
``*_unavailable()`` the reason a test skips.
"""

import atexit
import os
import subprocess
import tempfile
import uuid

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.testing.process import free_port

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_PASSWORD = os.environ.get("PULSAR_TEST_PG_PASSWORD", "pulsar")

_servers = {}



def _server(env: str, script: str):
    """(host, port) or (None, reason)."""
    if env in _servers:
        return _servers[env]
    given = os.environ.get(env)
    if given:
        host, _, port = given.rpartition(":")
        _servers[env] = (host, int(port))
        return _servers[env]
    directory = tempfile.mkdtemp(prefix=f"pulsar-test-{script}-")
    os.chmod(directory, 0o755)   # the postgres user must reach it
    port = free_port()
    path = os.path.join(_ROOT, "scripts", f"{script}.sh")
    done = subprocess.run(["bash", path, "start", directory, str(port)], capture_output=True, text=True,
                          timeout=180)
    if done.returncode != 0:
        _servers[env] = (None, f"{script} unavailable (set {env}=host:port): "
                               f"{(done.stdout + done.stderr).strip()[-300:]}")
    else:
        atexit.register(subprocess.run, ["bash", path, "stop", directory], capture_output=True, timeout=60)
        _servers[env] = ("127.0.0.1", port)
    return _servers[env]


def postgres():
    host, port = _server("PULSAR_TEST_PG", "postgres")
    return (host, port) if host else None


def postgres_unavailable():
    host, reason = _server("PULSAR_TEST_PG", "postgres")
    if host is None:
        return reason
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]')"
    return None


def redis():
    host, port = _server("PULSAR_TEST_REDIS", "redis")
    return (host, port) if host else None


def redis_unavailable():
    host, reason = _server("PULSAR_TEST_REDIS", "redis")
    if host is None:
        return reason
    try:
        import redis as _  # noqa: F401
    except ImportError:
        return "the redis package is not installed (pip install redis)"
    return None


def pg_connect(dbname="postgres", **kw):
    import psycopg
    host, port = postgres()
    return psycopg.connect(host=host, port=port, user="postgres", password=PG_PASSWORD,
                           dbname=dbname, **kw)


def pg_database(case) -> str:
    """A fresh database for ``case`` (dropped at its cleanup, its slots first)."""
    name = "t_" + uuid.uuid4().hex[:12]
    admin = pg_connect(autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')

    def drop():
        for (slot,) in admin.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                                     (name,)).fetchall():
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
    case.addCleanup(drop)
    return name


def pg_configs(dbname: str) -> dict:
    host, port = postgres()
    return {"jdbcUrl": f"jdbc:postgresql://{host}:{port}/{dbname}", "userName": "postgres",
            "password": PG_PASSWORD}


class ServerTests(SynchronousTestCase):
    """The servers the scripts start answer (the scripts' own check)."""

    def test_postgres_has_logical_wal(self):
        reason = postgres_unavailable()
        if reason:
            raise self.skipTest(reason)
        with pg_connect() as c:
            self.assertEqual(c.execute("SHOW wal_level").fetchone()[0], "logical")

    def test_redis_answers(self):
        reason = redis_unavailable()
        if reason:
            raise self.skipTest(reason)
        import redis as client
        host, port = redis()
        self.assertTrue(client.Redis(host=host, port=port).ping())
