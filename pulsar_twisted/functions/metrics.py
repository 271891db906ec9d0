"""
Per-instance function metrics with Pulsar's names, for the broker's ``/metrics`` (Pulsar's broker
adds its functions worker's metrics there too): ``pulsar_function_received_total``,
``..._processed_successfully_total``, ``..._user_exceptions_total``,
``..._system_exceptions_total``, ``pulsar_function_process_latency_ms`` (a summary of count and
sum; the quantiles Pulsar also exports are not kept yet) and ``pulsar_function_last_invocation``,
labelled as Pulsar labels them (``tenant``, ``namespace``, ``name``, ``instance_id``, ``cluster``,
``fqfn``). Counts restart with the instance process, as Pulsar's do.
"""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

LABELS = ["tenant", "namespace", "name", "instance_id", "cluster", "fqfn"]

#: (family name, help, supervisor counter)
_COUNTERS = (
    ("pulsar_function_received_total", "Total number of messages received from source.",
     "numReceived"),
    ("pulsar_function_processed_successfully_total", "Total number of messages processed successfully.",
     "numSuccessfullyProcessed"),
    ("pulsar_function_user_exceptions_total", "Total number of user exceptions.", "numUserExceptions"),
    ("pulsar_function_system_exceptions_total", "Total number of system exceptions.",
     "numSystemExceptions"),
)


class FunctionsCollector:
    """A prometheus_client collector over ``worker()`` (a FunctionsWorker, or None: no families)."""

    def __init__(self, worker, cluster: str):
        self.worker = worker
        self.cluster = cluster

    def collect(self):
        worker = self.worker()
        if worker is None:
            return
        counters = [CounterMetricFamily(name, doc, labels=LABELS) for name, doc, _ in _COUNTERS]
        latency = SummaryMetricFamily("pulsar_function_process_latency_ms",
                                      "Process latency in milliseconds.", labels=LABELS)
        last = GaugeMetricFamily("pulsar_function_last_invocation",
                                 "The timestamp of the last invocation of the function.", labels=LABELS)
        for (tenant, namespace, name), runtime in sorted(worker.functions.items()):
            for supervisor in runtime.supervisors.values():
                c = supervisor.counters
                labels = [tenant, namespace, name, str(supervisor.instance_id), self.cluster,
                          f"{tenant}/{namespace}/{name}"]
                for family, (_, _, key) in zip(counters, _COUNTERS):
                    family.add_metric(labels, c[key])
                latency.add_metric(labels, count_value=c["numReceived"],
                                   sum_value=c["averageLatency"] * c["numReceived"])
                last.add_metric(labels, c["lastInvocationTime"])
        yield from counters
        yield latency
        yield last


def function_stats(per: list) -> dict:
    """Pulsar's ``FunctionStatsImpl`` from the instances' ``[{"instanceId", "metrics"}]``: totals,
    the mean of the instances' average latencies and the latest invocation, and ``instances``."""
    total = lambda key: sum(p["metrics"][key] for p in per)  # noqa: E731
    latencies = [p["metrics"]["avgProcessLatency"] for p in per if p["metrics"]["avgProcessLatency"]]
    lasts = [p["metrics"]["lastInvocation"] for p in per if p["metrics"]["lastInvocation"]]
    return {"receivedTotal": total("receivedTotal"),
            "processedSuccessfullyTotal": total("processedSuccessfullyTotal"),
            "systemExceptionsTotal": total("systemExceptionsTotal"),
            "userExceptionsTotal": total("userExceptionsTotal"),
            "avgProcessLatency": sum(latencies) / len(latencies) if latencies else None,
            "lastInvocation": max(lasts) if lasts else None,
            "instances": per}
