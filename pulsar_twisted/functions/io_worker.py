"""
``ConnectorsManager``: the functions worker's Pulsar IO side, one per kind (sources, sinks).
A connector is registered, stored on the platform (``FunctionStore`` under
``/functions/io/{kind}``), written to ``download_directory`` as an instance spec with
``componentType`` SOURCE or SINK, and run by ``parallelism`` ``InstanceSupervisor``s, exactly
as the worker runs a function's instances (same launcher, same restarts, same status); a worker
started on the same store restarts them (``start``).

Errors are ``errors.FunctionsError`` with the HTTP status Pulsar's worker answers.
"""

import json
import os
import time

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.functions.errors import FunctionExists, FunctionNotFound, InvalidFunctionConfig
from pulsar_twisted.functions.io_config import CONFIGS
from pulsar_twisted.functions.store import ROOT, FunctionStore
from pulsar_twisted.functions.supervisor import InstanceSupervisor, apply_running
from pulsar_twisted.metadata.layout import namespace_path, tenant_path


class ConnectorRuntime:
    def __init__(self, config, record: dict):
        self.config = config
        self.record = record
        self.supervisors = []


class ConnectorsManager:
    """Sources (``kind="source"``) or sinks (``kind="sink"``) of one functions worker."""

    log = Logger()

    def __init__(self, kind: str, worker):
        self.kind = kind
        self.config_class = CONFIGS[kind]
        self.worker = worker
        self.store = FunctionStore(worker.metadata, f"{ROOT}/io/{kind}s")
        self.connectors = {}

    @property
    def what(self) -> str:
        return self.kind.capitalize()

    async def start(self) -> None:
        for tenant, namespace, name, record in await self.store.load_all():
            runtime = ConnectorRuntime(self.config_class.from_json(record[f"{self.kind}Config"]), record)
            self.connectors[(tenant, namespace, name)] = runtime
            self._run(runtime)

    def stop(self, grace: float = 5.0):
        return defer.gatherResults([s.shutdown(grace) for runtime in self.connectors.values()
                                    for s in runtime.supervisors])

    async def register(self, tenant, namespace, name, config_json) -> None:
        """Pulsar's registerSource/registerSink (built-in connectors: no package part)."""
        config = await self._checked_config(tenant, namespace, name, config_json)
        if (tenant, namespace, name) in self.connectors:
            raise FunctionExists(f"{self.what} {name} already exists", 400)
        record = {f"{self.kind}Config": config.to_json(), "version": 0,
                  "createTime": int(time.time() * 1000)}
        await self.store.put_record(tenant, namespace, name, record)
        runtime = ConnectorRuntime(config, record)
        self.connectors[(tenant, namespace, name)] = runtime
        self._run(runtime)

    async def update(self, tenant, namespace, name, config_json) -> None:
        """Pulsar's updateSource/updateSink: the given fields change (``validateUpdate``'s
        rules), the version goes up and every instance restarts on the new config."""
        runtime = self._runtime(tenant, namespace, name)
        if not isinstance(config_json, dict):
            raise InvalidFunctionConfig(f"{self.what} config is not provided")
        config = runtime.config.merged_with(dict(config_json, tenant=tenant, namespace=namespace,
                                                 name=name))
        config.validate()
        record = dict(runtime.record, **{f"{self.kind}Config": config.to_json()},
                      version=runtime.record["version"] + 1)
        await self.store.put_record(tenant, namespace, name, record)
        await defer.gatherResults([s.shutdown() for s in runtime.supervisors])
        runtime.config, runtime.record = config, record
        self._run(runtime)

    async def deregister(self, tenant, namespace, name) -> None:
        runtime = self._runtime(tenant, namespace, name)
        del self.connectors[(tenant, namespace, name)]
        await defer.gatherResults([s.shutdown() for s in runtime.supervisors])
        await self.store.delete_function(tenant, namespace, name)
        config = runtime.config
        cleaner = self.worker.cleaner
        if self.kind == "sink" and config.cleanupSubscription and cleaner is not None:
            await cleaner.delete(config.input_topics(), config.subscription_name())

    def get(self, tenant, namespace, name) -> dict:
        return self._runtime(tenant, namespace, name).config.to_json()

    def list(self, tenant, namespace) -> list:
        return sorted(n for (t, ns, n) in self.connectors if (t, ns) == (tenant, namespace))

    async def set_running(self, tenant, namespace, name, running: bool, instance=None,
                          restart: bool = False) -> None:
        """Pulsar's start/stop/restart of a connector (one instance or all); stopped instances
        stay stopped across a worker restart (the record keeps them)."""
        runtime = self._runtime(tenant, namespace, name)
        if instance is None:
            chosen = list(range(len(runtime.supervisors)))
        elif 0 <= instance < len(runtime.supervisors):
            chosen = [instance]
        else:
            raise InvalidFunctionConfig(f"Invalid instance id {instance}: the {self.kind} has "
                                        f"{len(runtime.supervisors)} instances")
        await apply_running(runtime, chosen, running, restart,
                            lambda record: self.store.put_record(tenant, namespace, name, record))

    def status(self, tenant, namespace, name) -> dict:
        """Pulsar's ``SourceStatus``/``SinkStatus``: its per-instance counters under their
        connector names (numReceivedFromSource/numWritten, ...)."""
        runtime = self._runtime(tenant, namespace, name)
        instances = [{"instanceId": s.instance_id, "status": self._instance_status(s)}
                     for s in runtime.supervisors]
        return {"numInstances": len(instances),
                "numRunning": sum(1 for i in instances if i["status"]["running"]),
                "instances": instances}

    def instance_status(self, tenant, namespace, name, instance: int) -> dict:
        """Pulsar's per-instance ``SourceInstanceStatusData``/``SinkInstanceStatusData``."""
        runtime = self._runtime(tenant, namespace, name)
        return self._instance_status(runtime.supervisors[self._instance(runtime, instance)])

    def stats(self, tenant, namespace, name) -> dict:
        """The instances' counters as Pulsar's ``FunctionStatsImpl`` (totals and per instance),
        what ``pulsar-admin sources|sinks stats`` prints."""
        runtime = self._runtime(tenant, namespace, name)
        per = [{"instanceId": s.instance_id, "metrics": s.stats()} for s in runtime.supervisors]
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

    def instance_stats(self, tenant, namespace, name, instance: int) -> dict:
        runtime = self._runtime(tenant, namespace, name)
        return runtime.supervisors[self._instance(runtime, instance)].stats()

    def _instance(self, runtime, instance: int) -> int:
        if not 0 <= instance < len(runtime.supervisors):
            raise InvalidFunctionConfig(f"Invalid instance id {instance}: the {self.kind} has "
                                        f"{len(runtime.supervisors)} instances")
        return instance

    def _instance_status(self, supervisor) -> dict:
        s = supervisor.status(self.worker.worker_id)
        status = {"running": s["running"], "error": s["error"], "numRestarts": s["numRestarts"],
                  "numSystemExceptions": s["numSystemExceptions"],
                  "latestSystemExceptions": [], "lastReceivedTime": s["lastInvocationTime"],
                  "workerId": s["workerId"]}
        # The connector's own refusals (a sink's bad records) count as its exceptions.
        if self.kind == "source":
            status.update(numReceivedFromSource=s["numReceived"],
                          numWritten=s["numSuccessfullyProcessed"],
                          numSourceExceptions=s["numUserExceptions"],
                          latestSourceExceptions=s["latestUserExceptions"])
        else:
            status.update(numReadFromPulsar=s["numReceived"],
                          numWrittenToSink=s["numSuccessfullyProcessed"],
                          numSinkExceptions=s["numUserExceptions"],
                          latestSinkExceptions=s["latestUserExceptions"])
        return status

    # ---------------------------------------------------------------- internals
    def _runtime(self, tenant, namespace, name) -> ConnectorRuntime:
        runtime = self.connectors.get((tenant, namespace, name))
        if runtime is None:
            raise FunctionNotFound(f"{self.what} {name} doesn't exist")
        return runtime

    async def _checked_config(self, tenant, namespace, name, config_json):
        if not isinstance(config_json, dict):
            raise InvalidFunctionConfig(f"{self.what} config is not provided")
        for field, value in (("tenant", tenant), ("namespace", namespace), ("name", name)):
            if config_json.get(field) not in (None, value):
                raise InvalidFunctionConfig(f"{self.what} {field} in the config "
                                            f"({config_json[field]}) differs from the path ({value})")
        config = self.config_class.from_json(dict(config_json, tenant=tenant, namespace=namespace,
                                                  name=name))
        config.validate()
        metadata = self.worker.metadata
        if await metadata.exists(tenant_path(tenant)) is None:
            raise InvalidFunctionConfig(f"Tenant {tenant} does not exist")
        if await metadata.exists(namespace_path(f"{tenant}/{namespace}")) is None:
            raise InvalidFunctionConfig(f"Namespace {tenant}/{namespace} does not exist")
        return config

    def _run(self, runtime) -> None:
        config = runtime.config
        directory = os.path.join(self.worker.download_directory, "io", f"{self.kind}s",
                                 config.tenant, config.namespace, config.name)
        os.makedirs(directory, exist_ok=True)
        spec_path = os.path.join(directory, "instance.json")
        spec = {"componentType": self.kind.upper(), f"{self.kind}Config": config.to_json(),
                "serviceUrl": self.worker.service_url, "webServiceUrl": self.worker.web_service_url,
                "functionId": config.fqn, "functionVersion": str(runtime.record["version"])}
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        runtime.supervisors = [
            InstanceSupervisor(f"{self.kind}:{config.fqn}", i, self.worker.launcher(spec_path, i),
                               self.worker.clock)
            for i in range(config.parallelism)]
        stopped = set(runtime.record.get("stopped", []))
        for supervisor in runtime.supervisors:
            if supervisor.instance_id not in stopped:
                supervisor.start()
