"""
The ``redis`` sink, with Pulsar's ``RedisSinkConfig`` keys: ``redisHosts`` (``host:port``, the
first of a comma-separated list for ``clientMode`` ``Standalone``, the only mode here),
``redisPassword``, ``redisDatabase`` (0), ``connectTimeout`` and ``operationTimeout`` (ms,
10000), ``batchSize`` (200) and ``batchTimeMs`` (1000).

Each message becomes ``SET <message key> <value>``; a batch goes out as one pipeline (one
``MULTI``/``EXEC`` transaction) and ``write`` returns once Redis answered it, so the instance
acks a message only after its key is written. A message without a key is refused (negative-acked).
"""

import logging

from pulsar_twisted.functions.connectors.base import BadRecord

log = logging.getLogger(__name__)


def _host_port(hosts: str) -> tuple:
    first = (hosts or "").split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"redisHosts {hosts!r} is not host:port[,host:port...]")
    return host, int(port)


class RedisSink:

    def __init__(self, configs: dict, clock=None):
        import redis
        mode = str(configs.get("clientMode", "Standalone"))
        if mode.lower() != "standalone":
            raise ValueError(f"clientMode {mode} is not supported: Standalone only")
        host, port = _host_port(configs.get("redisHosts"))
        self.batch_size = int(configs.get("batchSize", 200))
        self.batch_time_ms = int(configs.get("batchTimeMs", 1000))
        self.client = redis.Redis(
            host=host, port=port, db=int(configs.get("redisDatabase", 0)),
            password=configs.get("redisPassword") or None,
            socket_connect_timeout=int(configs.get("connectTimeout", 10000)) / 1000.0,
            socket_timeout=int(configs.get("operationTimeout", 10000)) / 1000.0,
            socket_keepalive=bool(configs.get("keepAlive", False)))
        self.client.ping()

    def write(self, records) -> list:
        bad, pipe = [], self.client.pipeline(transaction=True)
        written = 0
        for record in records:
            if record.key is None:
                record.error = "message has no key (the Redis key)"
                bad.append(record)
                continue
            pipe.set(record.key, record.value)
            written += 1
        if written:
            pipe.execute()
        return bad

    def close(self) -> None:
        self.client.close()


__all__ = ["RedisSink", "BadRecord"]
