"""
``ConnectorsManager``: the functions worker's Pulsar IO side, one per kind (sources, sinks),
scheduled as Pulsar schedules them: a connector is a function record of another component type.

- Its record (``{kind}Config``, ``version``, ``stopped``) is on the worker's ``metadata`` topic,
  keyed ``{kind}/tenant/ns/name`` (a tenant has no ``/``, so the key never meets a function's
  ``tenant/ns/name``); the leader writes it, a non-leader forwards create, update, delete,
  start and stop to the leader over ``/admin/v3/{kind}s``.
- The leader assigns its instances (``{kind}/tenant/ns/name:i``) with the functions' on the
  ``assignments`` topic (``worker._schedule``), and each worker runs exactly the instances
  assigned to it (``run_assigned``): instance spec under ``download_directory`` with
  ``componentType`` SOURCE or SINK, one ``InstanceSupervisor`` each; a worker that left has its
  instances taken over after ``rescheduleTimeoutMs``.
- Status, stats and restart of an instance on another worker are asked of that worker.
- Connectors an earlier version kept in the metadata store (``/functions/io/{kind}s``) are moved
  onto the topic once by the leader (``import_legacy``).

Errors are ``errors.FunctionsError`` with the HTTP status Pulsar's worker answers.
"""

import json
import os
import time
from urllib.parse import quote

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.functions.credentials import write_spec
from pulsar_twisted.functions.errors import (
    FunctionExists, FunctionNotFound, FunctionsError, InvalidFunctionConfig)
from pulsar_twisted.functions.forward import multipart
from pulsar_twisted.functions.io_config import CONFIGS
from pulsar_twisted.functions.metrics import function_stats
from pulsar_twisted.functions.store import ROOT, FunctionStore
from pulsar_twisted.functions.supervisor import InstanceSupervisor, State
from pulsar_twisted.metadata.layout import namespace_path, tenant_path


class ConnectorRuntime:
    """One connector as this worker knows it: config, record and the supervisors of the
    instances it runs here (``{instance id: supervisor}``)."""

    def __init__(self, config, record: dict):
        self.config = config
        self.record = record
        self.supervisors = {}
        #: The record version whose instance spec is on local disk (None: not written).
        self.local_version = None


class ConnectorsManager:
    """Sources (``kind="source"``) or sinks (``kind="sink"``) of one functions worker."""

    log = Logger()

    def __init__(self, kind: str, worker):
        self.kind = kind
        self.config_class = CONFIGS[kind]
        self.worker = worker
        #: Where an earlier version kept the records (read once by the leader, then emptied).
        self.store = FunctionStore(worker.metadata, f"{ROOT}/io/{kind}s")
        self.connectors = {}

    @property
    def what(self) -> str:
        return self.kind.capitalize()

    # ---------------------------------------------------------------- keys
    def key(self, tenant, namespace, name) -> str:
        """The connector's key on the metadata topic (and, with ``:i``, on the assignments)."""
        return f"{self.kind}/{tenant}/{namespace}/{name}"

    def path(self, tenant, namespace, name, rest: str = "") -> str:
        return (f"/admin/v3/{self.kind}s/" + "/".join(quote(x, safe="") for x in (tenant, namespace, name))
                + rest)

    def instances(self) -> list:
        """Every instance key of every connector, for the leader's scheduling."""
        return [f"{self.key(*fqn)}:{i}" for fqn, runtime in sorted(self.connectors.items())
                for i in range(runtime.config.parallelism)]

    def record_changed(self, rest: str, new) -> None:
        """The metadata topic's ``{kind}/{rest}`` changed (``new`` None: deleted)."""
        fqn = tuple(rest.split("/", 2))
        if new is None:
            runtime = self.connectors.pop(fqn, None)
            if runtime is not None:
                self.worker._stopping += [s.shutdown() for s in runtime.supervisors.values()]
                runtime.supervisors = {}
            return
        try:
            config = self.config_class.from_json(new[f"{self.kind}Config"])
        except Exception as e:
            self.log.error("{kind} record {key} is unreadable, ignored: {e}", kind=self.kind,
                           key=rest, e=e)
            return
        runtime = self.connectors.get(fqn)
        if runtime is None:
            self.connectors[fqn] = ConnectorRuntime(config, new)
        else:
            runtime.config, runtime.record = config, new

    async def import_legacy(self) -> None:
        """Records an earlier version kept in the metadata store moved onto the topic, once."""
        for tenant, namespace, name, record in await self.store.load_all():
            key = self.key(tenant, namespace, name)
            if self.worker.records.get(key) is None:
                await self.worker.records.write(key, record)
                self.log.info("{kind} {key} moved from the metadata store onto {topic}",
                              kind=self.kind, key=key, topic=self.worker.topics["metadata"])
            await self.store.delete_function(tenant, namespace, name)

    def stop(self, grace: float = 5.0):
        return defer.gatherResults([s.shutdown(grace) for runtime in self.connectors.values()
                                    for s in runtime.supervisors.values()])

    # ---------------------------------------------------------------- management
    def _forward(self, method, tenant, namespace, name, rest="", config_json=None):
        body = ctype = None
        if config_json is not None:
            body, ctype = multipart([(f"{self.kind}Config", json.dumps(config_json).encode(),
                                      "application/json")])
        return self.worker._to_leader(method, self.path(tenant, namespace, name, rest), body, ctype)

    async def register(self, tenant, namespace, name, config_json) -> None:
        """Pulsar's registerSource/registerSink (built-in connectors: no package part)."""
        if not self.worker.is_leader:
            if not isinstance(config_json, dict):
                raise InvalidFunctionConfig(f"{self.what} config is not provided")
            await self._forward("POST", tenant, namespace, name, config_json=config_json)
            return
        config = await self._checked_config(tenant, namespace, name, config_json)
        if (tenant, namespace, name) in self.connectors:
            raise FunctionExists(f"{self.what} {name} already exists", 400)
        record = {f"{self.kind}Config": config.to_json(), "version": 0,
                  "createTime": int(time.time() * 1000)}
        await self.worker.records.write(self.key(tenant, namespace, name), record)
        await self.worker._settled()

    async def update(self, tenant, namespace, name, config_json) -> None:
        """Pulsar's updateSource/updateSink: the given fields change (``validateUpdate``'s
        rules), the version goes up and every instance restarts on the new config (on the
        worker running it)."""
        if not isinstance(config_json, dict):
            raise InvalidFunctionConfig(f"{self.what} config is not provided")
        if not self.worker.is_leader:
            await self._forward("PUT", tenant, namespace, name, config_json=config_json)
            return
        runtime = self._runtime(tenant, namespace, name)
        config = runtime.config.merged_with(dict(config_json, tenant=tenant, namespace=namespace,
                                                 name=name))
        config.validate()
        record = dict(runtime.record, **{f"{self.kind}Config": config.to_json()},
                      version=runtime.record["version"] + 1)
        await self.worker.records.write(self.key(tenant, namespace, name), record)
        await self.worker._settled()

    async def deregister(self, tenant, namespace, name) -> None:
        if not self.worker.is_leader:
            await self._forward("DELETE", tenant, namespace, name)
            return
        runtime = self._runtime(tenant, namespace, name)
        await self.worker.records.write(self.key(tenant, namespace, name), None)
        await self.worker._settled()
        await defer.gatherResults(list(self.worker._stopping))
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
        """Pulsar's start/stop/restart of a connector (one instance or all): start/stop are
        the record's ``stopped`` instances, written by the leader (they stay stopped across
        worker restarts and reassignments); restart is done by the worker running each."""
        runtime = self._runtime(tenant, namespace, name)
        chosen = self._instances(runtime, instance)
        if restart:
            for i in chosen:
                supervisor = runtime.supervisors.get(i)
                if supervisor is not None:
                    if i not in runtime.record.get("stopped", []):
                        supervisor.restart()
                    continue
                url = self._owner_url(tenant, namespace, name, i)
                if url is not None:
                    await self.worker.forwarder.call(url, "POST", self.path(
                        tenant, namespace, name, f"/{i}/restart"))
            return
        if not self.worker.is_leader:
            verb = "start" if running else "stop"
            await self._forward("POST", tenant, namespace, name,
                                f"/{verb}" if instance is None else f"/{instance}/{verb}")
            return
        before = set(runtime.record.get("stopped", []))
        stopped = before - set(chosen) if running else before | set(chosen)
        if stopped != before:
            await self.worker.records.write(self.key(tenant, namespace, name),
                                            dict(runtime.record, stopped=sorted(stopped)))
        else:
            self.worker._changed()
        await self.worker._settled()

    # ---------------------------------------------------------------- views
    def assigned_worker(self, tenant, namespace, name, instance: int):
        value = self.worker.assignments.get(f"{self.key(tenant, namespace, name)}:{instance}")
        return None if value is None else value.get("workerId")

    def _owner_url(self, tenant, namespace, name, instance):
        owner = self.assigned_worker(tenant, namespace, name, instance)
        if owner is None or owner == self.worker.worker_id:
            return None
        return self.worker.coordinator.members.get(owner)

    async def _remote(self, runtime, i, what: str):
        """The answer of the worker running instance ``i`` to ``GET .../i/{what}`` (None: no
        live worker runs it or it did not answer)."""
        config = runtime.config
        url = self._owner_url(config.tenant, config.namespace, config.name, i)
        if url is None:
            return None
        try:
            return await self.worker.forwarder.call(url, "GET", self.path(
                config.tenant, config.namespace, config.name, f"/{i}/{what}"))
        except FunctionsError as e:
            self.log.warn("{what} of {kind} {fqn}:{i}: {e}", what=what, kind=self.kind,
                          fqn=config.fqn, i=i, e=e)
            return None

    async def _status_of(self, runtime, i) -> dict:
        supervisor = runtime.supervisors.get(i)
        if supervisor is not None:
            return self._instance_status(supervisor.status(self.worker.worker_id))
        answer = await self._remote(runtime, i, "status")
        if answer is not None:
            return answer
        config = runtime.config
        owner = self.assigned_worker(config.tenant, config.namespace, config.name, i) or ""
        s = InstanceSupervisor("", 0, None, None).status(owner)
        s["error"] = ("not assigned to a live worker yet" if not owner
                      else f"instance not running here; its worker {owner} did not answer")
        return self._instance_status(s)

    async def _stats_of(self, runtime, i) -> dict:
        supervisor = runtime.supervisors.get(i)
        if supervisor is not None:
            return supervisor.stats()
        answer = await self._remote(runtime, i, "stats")
        return answer if answer is not None else InstanceSupervisor("", 0, None, None).stats()

    async def status(self, tenant, namespace, name) -> dict:
        """Pulsar's ``SourceStatus``/``SinkStatus``: its per-instance counters under their
        connector names (numReceivedFromSource/numWritten, ...), asked of each instance's worker."""
        runtime = self._runtime(tenant, namespace, name)
        instances = [{"instanceId": i, "status": await self._status_of(runtime, i)}
                     for i in range(runtime.config.parallelism)]
        return {"numInstances": len(instances),
                "numRunning": sum(1 for i in instances if i["status"]["running"]),
                "instances": instances}

    async def instance_status(self, tenant, namespace, name, instance: int) -> dict:
        """Pulsar's per-instance ``SourceInstanceStatusData``/``SinkInstanceStatusData``."""
        runtime = self._runtime(tenant, namespace, name)
        return await self._status_of(runtime, self._instances(runtime, instance)[0])

    async def stats(self, tenant, namespace, name) -> dict:
        """The instances' counters as Pulsar's ``FunctionStatsImpl`` (totals and per instance),
        what ``pulsar-admin sources|sinks stats`` prints."""
        runtime = self._runtime(tenant, namespace, name)
        per = [{"instanceId": i, "metrics": await self._stats_of(runtime, i)}
               for i in range(runtime.config.parallelism)]
        return function_stats(per)

    async def instance_stats(self, tenant, namespace, name, instance: int) -> dict:
        runtime = self._runtime(tenant, namespace, name)
        return await self._stats_of(runtime, self._instances(runtime, instance)[0])

    def _instances(self, runtime, instance) -> list:
        count = runtime.config.parallelism
        if instance is None:
            return list(range(count))
        if not 0 <= instance < count:
            raise InvalidFunctionConfig(f"Invalid instance id {instance}: the {self.kind} has "
                                        f"{count} instances")
        return [instance]

    def _instance_status(self, s) -> dict:
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

    def run_assigned(self, mine: dict) -> None:
        """Run exactly the instances assigned here (``mine``: assignment key without ``:i`` ->
        instance ids), at their record's version, stopped when the record says so."""
        for fqn, runtime in list(self.connectors.items()):
            wanted = {i for i in mine.get(self.key(*fqn), ()) if i < runtime.config.parallelism}
            version = runtime.record["version"]
            if wanted and runtime.local_version != version:
                for supervisor in runtime.supervisors.values():
                    supervisor.stop()
                runtime.supervisors = {}
                self._run(runtime)
                runtime.local_version = version
            for i in sorted(set(runtime.supervisors) - wanted):
                self.worker._stopping.append(runtime.supervisors.pop(i).shutdown())
            stopped = set(runtime.record.get("stopped", []))
            for i in sorted(wanted):
                supervisor = runtime.supervisors.get(i)
                if supervisor is None:
                    supervisor = runtime.supervisors[i] = InstanceSupervisor(
                        f"{self.kind}:{runtime.config.fqn}", i,
                        self.worker.launcher(self._spec_path(runtime.config), i), self.worker.clock)
                if i in stopped:
                    if supervisor.state is not State.STOPPED:
                        supervisor.stop()
                elif supervisor.state is State.STOPPED:
                    supervisor.start()

    def _spec_path(self, config) -> str:
        return os.path.join(self.worker.download_directory, "io", f"{self.kind}s",
                            config.tenant, config.namespace, config.name, "instance.json")

    def _run(self, runtime) -> None:
        """The instance spec of the record's version written where the instances read it."""
        config = runtime.config
        spec_path = self._spec_path(config)
        os.makedirs(os.path.dirname(spec_path), exist_ok=True)
        spec = {"componentType": self.kind.upper(), f"{self.kind}Config": config.to_json(),
                "serviceUrl": self.worker.service_url, "webServiceUrl": self.worker.web_service_url,
                "functionId": config.fqn, "functionVersion": str(runtime.record["version"]),
                **self.worker.instance_credentials}
        write_spec(spec_path, spec)
