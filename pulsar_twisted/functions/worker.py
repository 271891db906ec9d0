"""
``FunctionsWorker``: the functions worker's decisions, with its records on the platform as Pulsar
keeps them (``platform.py``, in ``pulsarFunctionsNamespace``):

- function metadata on the ``metadata`` topic, one message per change keyed ``tenant/ns/name``
  (tombstone on delete), read from the earliest by every worker at start and tailed after;
- packages on the ``packages`` topic (chunked, so any size), named by the record's
  ``packageLocation``;
- assignments on the ``assignments`` topic, keyed ``tenant/ns/name:instance`` with the
  ``workerId`` running it, written by the leader only;
- state (counters, values) in the metadata store (``store.FunctionStore``), shared by every worker.

The leader (``membership.Coordinator``: the active consumer of the coordination topic's Failover
subscription) writes metadata and assignments; the other workers forward create, update, delete,
start and stop to it over HTTP (``forward.py``), and ask the worker running an instance for its
status, stats and restarts. Every worker converges on what the tables say (``_converge``): it runs
the instances assigned to it (package and instance spec written under ``download_directory``, one
``InstanceSupervisor`` each) and the leader reassigns the instances of a worker that left, so a
restarted or replaced worker takes over. Errors are ``errors.FunctionsError`` with the HTTP
status Pulsar's worker answers; the web layer only translates.
"""

import base64
import json
import os
import time

from twisted.internet import defer, task
from twisted.logger import Logger

from pulsar_twisted.functions.config import FunctionConfig
from pulsar_twisted.functions.credentials import write_spec
from pulsar_twisted.functions.errors import (
    FunctionExists, FunctionNotFound, FunctionsError, InvalidFunctionConfig, NotSupportedYet)
from pulsar_twisted.functions.forward import Forwarder, function_path, multipart
from pulsar_twisted.functions.io_worker import ConnectorsManager
from pulsar_twisted.functions.membership import SoloCoordinator, schedule
from pulsar_twisted.functions.metrics import function_stats
from pulsar_twisted.functions.platform import (
    PackageTopic, TopicTable, ensure_namespace, ensure_topics)
from pulsar_twisted.functions.store import FunctionStore
from pulsar_twisted.functions.supervisor import InstanceSupervisor, State
from pulsar_twisted.functions.trigger import trigger
from pulsar_twisted.metadata.layout import namespace_path, tenant_path


#: A .zip package (Pulsar's ``name/src``, ``name/requirements.txt``, ``name/deps/*.whl``) or a
#: wheel (``--py name-1.0-py3-none-any.whl``).
ZIP_MAGIC = b"PK\x03\x04"
#: Pulsar's functions_worker.yml defaults for the topics in ``pulsarFunctionsNamespace``; the
#: packages topic is ours (Pulsar keeps packages in DistributedLog).
#: Seconds a write waits for a leader to be known before answering 503.
LEADER_WAIT = 10.0
TOPICS = {"metadata": "metadata", "assignments": "assignments", "coordinate": "coordinate",
          "packages": "packages"}


class FunctionRuntime:
    """One registered function as this worker knows it: its config, record and the supervisors
    of the instances it runs here (``{instance id: supervisor}``)."""

    def __init__(self, config: FunctionConfig, record: dict):
        self.config = config
        self.record = record
        self.supervisors = {}
        #: The record version whose package and spec are on local disk (None: not written).
        self.local_version = None


def _fkey(tenant, namespace, name) -> str:
    return f"{tenant}/{namespace}/{name}"


def _absent_status(error: str, worker_id: str) -> dict:
    status = InstanceSupervisor("", 0, None, None).status(worker_id)
    status["error"] = error
    return status


class FunctionsWorker:
    """See the module docstring. ``launcher(spec_path, instance_id)`` returns the ``launch``
    callable of one instance (``runtime.ProcessLauncher``, or a fake in tests); ``client`` is a
    ``pulsar_twisted.client.Client`` on the cluster (records, packages, assignments, trigger);
    ``coordinator`` a ``membership.Coordinator`` (default: this worker alone, the leader);
    ``admin_url`` the brokers' admin API, where the namespace is created at start (None: it
    exists)."""

    log = Logger()

    def __init__(self, store, clock, launcher, service_url: str, web_service_url: str,
                 download_directory: str, worker_id: str = "standalone", cleaner=None,
                 client=None, coordinator=None, namespace: str = "public/functions",
                 topics: dict = None, admin_url: str = None, forwarder=None, agent=None,
                 instance_credentials: dict = None):
        self.metadata = store
        self.store = FunctionStore(store)
        self.clock = clock
        self.launcher = launcher
        self.service_url = service_url
        self.web_service_url = web_service_url
        self.download_directory = download_directory
        self.worker_id = worker_id
        #: ``cleanup.SubscriptionCleaner`` (None: subscriptions are left when a function goes).
        self.cleaner = cleaner
        self.client = client
        self.namespace = namespace
        self.admin_url = admin_url
        self.topics = {kind: f"persistent://{namespace}/{local}"
                       for kind, local in dict(TOPICS, **(topics or {})).items()}
        self.records = TopicTable(client, self.topics["metadata"], self._record_changed)
        self.assignments = TopicTable(client, self.topics["assignments"], self._changed)
        self.packages = PackageTopic(client, self.topics["packages"])
        self.coordinator = coordinator or SoloCoordinator(worker_id, web_service_url)
        self.coordinator.on_change = self._changed
        #: The ``IAgent`` of this worker's calls to the brokers' admin API (None: a plain one);
        #: a ``client.http_lookup.AuthorizingAgent`` carries the worker's credentials.
        self.agent = agent
        self.forwarder = forwarder or Forwarder(clock, agent)
        #: What instances connect with (``credentials.instance_spec_fields``), put in each spec.
        self.instance_credentials = dict(instance_credentials or {})
        self.functions = {}
        #: True once ``start`` has read the platform: the admin API answers 503 before.
        self.ready = False
        self._started = self._stopped = False
        self._dirty = self._running = self._imported = False
        self._converging = None
        self._stopping = []
        #: Pulsar IO: the sources and sinks this worker runs (``io_worker.py``).
        self.sources = ConnectorsManager("source", self)
        self.sinks = ConnectorsManager("sink", self)

    # ---------------------------------------------------------------- life
    async def start(self) -> None:
        """Read the records and assignments from the platform, join the worker cluster, then
        run what is assigned here."""
        if self.admin_url:
            await ensure_namespace(self.clock, self.admin_url, self.namespace, self.agent)
            await ensure_topics(self.clock, self.admin_url, sorted(self.topics.values()), self.agent)
        await self.records.start()
        await self.assignments.start()
        await self.coordinator.start()
        self._started = True
        self._changed()
        if self._converging is not None:
            await self._converging
        self.ready = True
        self.log.info("functions worker {worker} started: {count} functions, {mine} instances here, "
                      "{sources} sources, {sinks} sinks", worker=self.worker_id,
                      count=len(self.functions),
                      mine=sum(len(r.supervisors) for m in (self.functions, self.sources.connectors,
                                                            self.sinks.connectors) for r in m.values()),
                      sources=len(self.sources.connectors), sinks=len(self.sinks.connectors))

    async def _import_legacy(self) -> None:
        """Functions an earlier version kept in the metadata store (``/functions/metadata``,
        ``/functions/packages``) moved onto the topics, once, by the leader; their state stays."""
        for tenant, namespace, name, record in await self.store.load_all():
            key = _fkey(tenant, namespace, name)
            if self.records.get(key) is None:
                package = await self.store.get_package(tenant, namespace, name) or b""
                record = dict(record, packageLocation=await self.packages.put(key, package),
                              packageSize=len(package))
                await self.records.write(key, record)
                self.log.info("function {key} moved from the metadata store onto {topic}", key=key,
                              topic=self.topics["metadata"])
            for kind in ("metadata", "packages"):
                await self.metadata.delete_recursive(self.store._path(kind, tenant, namespace, name))
        await self.sources.import_legacy()
        await self.sinks.import_legacy()

    def stop(self, grace: float = 5.0):
        """Leave the worker cluster, then stop every instance here (SIGTERM, SIGKILL after
        ``grace`` seconds); the functions stay on the platform for the other workers. A
        Deferred."""
        return defer.ensureDeferred(self._stop(grace))

    async def _stop(self, grace):
        self.ready = False
        self._stopped = True
        self._started = False
        await self.coordinator.close()
        await defer.gatherResults(
            [supervisor.shutdown(grace) for runtime in self.functions.values()
             for supervisor in runtime.supervisors.values()]
            + self._stopping + [self.sources.stop(grace), self.sinks.stop(grace)])
        for handle in (self.records, self.assignments, self.packages):
            await handle.close()

    async def start_until_started(self, first_delay: float = 1.0, max_delay: float = 60.0,
                                  failed_once: bool = False) -> None:
        """``start``, again after a failure (the platform unreachable, a refused namespace...)
        with a doubling delay, each failure logged; what a failed attempt opened is closed
        first. Returns once started (or when ``stop`` was called meanwhile)."""
        delay = first_delay
        while not self._stopped:
            if not failed_once:
                try:
                    await self.start()
                    return
                except Exception as e:
                    self.log.error("functions worker {worker} did not start: {error}; retrying "
                                   "in {delay} s (the admin API answers 503 meanwhile)",
                                   worker=self.worker_id, error=e, delay=delay)
            failed_once = False
            await self.coordinator.close()
            for handle in (self.records, self.assignments, self.packages):
                await handle.close()
            await task.deferLater(self.clock, delay, lambda: None)
            delay = min(delay * 2, max_delay)

    async def wait_ready(self, timeout: float) -> bool:
        """Whether ``start`` finishes within ``timeout`` seconds (requests arriving while the
        worker reads the platform wait for it rather than see a half-read table)."""
        waited = 0.0
        while not self.ready and waited < timeout:
            await task.deferLater(self.clock, 0.1, lambda: None)
            waited += 0.1
        return self.ready

    @property
    def is_leader(self) -> bool:
        return self.coordinator.is_leader

    # ---------------------------------------------------------------- tables -> instances
    def _record_changed(self, key, old, new) -> None:
        if key.count("/") == 3:
            # A connector's record: ``source/tenant/ns/name`` or ``sink/tenant/ns/name``.
            kind, _, rest = key.partition("/")
            manager = {"source": self.sources, "sink": self.sinks}.get(kind)
            if manager is None:
                self.log.error("metadata record {key}: unknown component type, ignored", key=key)
            else:
                manager.record_changed(rest, new)
                self._changed()
            return
        tenant, namespace, name = key.split("/", 2)
        fkey = (tenant, namespace, name)
        if new is None:
            runtime = self.functions.pop(fkey, None)
            if runtime is not None:
                self._stopping += [s.shutdown() for s in runtime.supervisors.values()]
                runtime.supervisors = {}
        else:
            config = FunctionConfig.from_json(new["functionConfig"])
            runtime = self.functions.get(fkey)
            if runtime is None:
                self.functions[fkey] = FunctionRuntime(config, new)
            else:
                runtime.config, runtime.record = config, new
        self._changed()

    def _changed(self, *ignored) -> None:
        """Something in the tables or the membership changed: converge (once at a time; a change
        during a pass makes another pass)."""
        if not self._started:
            return
        self._dirty = True
        if not self._running:
            self._running = True
            d = defer.ensureDeferred(self._converge())
            self._converging = None if d.called else d

    async def _converge(self) -> None:
        try:
            while self._dirty and self._started:
                self._dirty = False
                try:
                    if self.coordinator.is_leader:
                        if not self._imported:
                            await self._import_legacy()
                            self._imported = True
                        await self._schedule()
                    await self._run_assigned()
                except Exception:
                    self.log.failure("functions worker {worker}: converging failed; retrying",
                                     worker=self.worker_id)
                    self.clock.callLater(2.0, self._changed)
        finally:
            self._running = False
            self._converging = None

    async def _schedule(self) -> None:
        """The leader's part: every instance of every function, source and sink assigned to a
        live worker (one round-robin over all of them, as Pulsar's scheduler)."""
        instances = [f"{_fkey(*fkey)}:{i}" for fkey, runtime in sorted(self.functions.items())
                     for i in range(runtime.config.parallelism)]
        instances += self.sources.instances() + self.sinks.instances()
        current = {key: (value or {}).get("workerId") for key, value in self.assignments.table.items()}
        chosen = schedule(instances, current, list(self.coordinator.members))
        for key in sorted(set(current) - set(chosen)):
            await self.assignments.write(key, None)
        for key in instances:
            if key in chosen and current.get(key) != chosen[key]:
                await self.assignments.write(key, {"workerId": chosen[key]})

    def assigned_worker(self, tenant, namespace, name, instance: int):
        value = self.assignments.get(f"{_fkey(tenant, namespace, name)}:{instance}")
        return None if value is None else value.get("workerId")

    async def _run_assigned(self) -> None:
        """Run exactly the instances (functions', sources', sinks') assigned here, at their
        record's version, stopped when the record says so."""
        mine = {}
        for key, value in list(self.assignments.table.items()):
            if (value or {}).get("workerId") == self.worker_id:
                fkey, _, instance = key.rpartition(":")
                mine.setdefault(fkey, set()).add(int(instance))
        for fkey, runtime in list(self.functions.items()):
            wanted = {i for i in mine.get(_fkey(*fkey), ()) if i < runtime.config.parallelism}
            version = runtime.record["version"]
            if wanted and runtime.local_version != version:
                package = await self.packages.get(runtime.record["packageLocation"])
                if self.functions.get(fkey) is not runtime:
                    continue
                self._write_files(runtime, package)
                for supervisor in runtime.supervisors.values():
                    supervisor.stop()
                runtime.supervisors = {}
                runtime.local_version = version
            for i in sorted(set(runtime.supervisors) - wanted):
                self._stopping.append(runtime.supervisors.pop(i).shutdown())
            stopped = set(runtime.record.get("stopped", []))
            spec_path = os.path.join(self._directory(runtime.config), "instance.json")
            for i in sorted(wanted):
                supervisor = runtime.supervisors.get(i)
                if supervisor is None:
                    supervisor = runtime.supervisors[i] = InstanceSupervisor(
                        runtime.config.fqfn, i, self.launcher(spec_path, i), self.clock)
                if i in stopped:
                    if supervisor.state is not State.STOPPED:
                        supervisor.stop()
                elif supervisor.state is State.STOPPED:
                    supervisor.start()
        self.sources.run_assigned(mine)
        self.sinks.run_assigned(mine)
        self._stopping = [d for d in self._stopping if not d.called]

    # ---------------------------------------------------------------- management
    async def _to_leader(self, method, path, body=None, content_type=None):
        url = self.coordinator.leader_url or await self.coordinator.wait_for_leader(LEADER_WAIT)
        if url is None:
            raise FunctionsError("No leader among the functions workers yet; try again", 503)
        return await self.forwarder.call(url, method, path, body, content_type)

    def _forward_upload(self, method, tenant, namespace, name, config_json, package):
        parts = []
        if config_json is not None:
            parts.append(("functionConfig", json.dumps(config_json).encode(), "application/json"))
        if package:
            parts.append(("data", package, "application/octet-stream"))
        body, ctype = multipart(parts)
        return self._to_leader(method, function_path(tenant, namespace, name), body, ctype)

    async def register(self, tenant, namespace, name, config_json, package: bytes) -> None:
        """Pulsar's registerFunction: 400 when it exists or the config is invalid."""
        if not self.is_leader:
            await self._forward_upload("POST", tenant, namespace, name, config_json, package)
            return
        config = await self._checked_config(tenant, namespace, name, config_json)
        if (tenant, namespace, name) in self.functions:
            raise FunctionExists(f"Function {name} already exists", 400)
        if not package:
            raise InvalidFunctionConfig("Function package is not provided")
        location = await self.packages.put(_fkey(tenant, namespace, name), package)
        record = {"functionConfig": config.to_json(), "version": 0,
                  "createTime": int(time.time() * 1000), "packageSize": len(package),
                  "packageLocation": location, "stopped": []}
        await self.records.write(_fkey(tenant, namespace, name), record)
        await self._settled()

    async def update(self, tenant, namespace, name, config_json, package) -> None:
        """Pulsar's updateFunction: the given fields change, then every instance restarts."""
        if not self.is_leader:
            await self._forward_upload("PUT", tenant, namespace, name, config_json or {}, package)
            return
        runtime = self._runtime(tenant, namespace, name)
        update = FunctionConfig.from_json(dict(config_json or {}, tenant=tenant,
                                               namespace=namespace, name=name))
        config = runtime.config.merged_with(update)
        config.validate()
        record = dict(runtime.record, functionConfig=config.to_json(),
                      version=runtime.record["version"] + 1)
        if package:
            record.update(packageLocation=await self.packages.put(_fkey(tenant, namespace, name), package),
                          packageSize=len(package))
        await self.records.write(_fkey(tenant, namespace, name), record)
        await self._settled()

    async def deregister(self, tenant, namespace, name) -> None:
        """Pulsar's deregisterFunction: instances stopped, record gone, state deleted, and with
        ``cleanupSubscription`` the input subscription deleted."""
        if not self.is_leader:
            await self._to_leader("DELETE", function_path(tenant, namespace, name))
            return
        runtime = self._runtime(tenant, namespace, name)
        await self.records.write(_fkey(tenant, namespace, name), None)
        await self._settled()
        await defer.gatherResults(self._stopping)
        await self.store.delete_function(tenant, namespace, name)
        config = runtime.config
        if config.cleanupSubscription and self.cleaner is not None:
            await self.cleaner.delete(config.input_topics(), config.subscription_name())

    async def _settled(self) -> None:
        """Wait for the convergence pass the last write started (assignments written)."""
        while self._converging is not None:
            await self._converging

    def get(self, tenant, namespace, name) -> dict:
        return self._runtime(tenant, namespace, name).config.to_json()

    def list(self, tenant, namespace) -> list:
        return sorted(n for (t, ns, n) in self.functions if (t, ns) == (tenant, namespace))

    async def set_running(self, tenant, namespace, name, running: bool, instance=None,
                          restart: bool = False) -> None:
        """start/stop (the record's ``stopped`` instances, written by the leader: they stay
        stopped across worker restarts and reassignments) and restart (by the worker running
        each instance)."""
        runtime = self._runtime(tenant, namespace, name)
        chosen = self._instances(runtime, instance)
        if restart:
            await self._restart(runtime, chosen)
            return
        if not self.is_leader:
            verb = "start" if running else "stop"
            rest = f"/{verb}" if instance is None else f"/{instance}/{verb}"
            await self._to_leader("POST", function_path(tenant, namespace, name, rest))
            return
        before = set(runtime.record.get("stopped", []))
        stopped = before - set(chosen) if running else before | set(chosen)
        if stopped != before:
            await self.records.write(_fkey(tenant, namespace, name),
                                     dict(runtime.record, stopped=sorted(stopped)))
            await self._settled()
        elif running:
            self._changed()
            await self._settled()

    async def _restart(self, runtime, chosen) -> None:
        config = runtime.config
        for i in chosen:
            supervisor = runtime.supervisors.get(i)
            if supervisor is not None:
                if i not in runtime.record.get("stopped", []):
                    supervisor.restart()
                continue
            url = self._owner_url(config.tenant, config.namespace, config.name, i)
            if url is not None:
                await self.forwarder.call(url, "POST", function_path(
                    config.tenant, config.namespace, config.name, f"/{i}/restart"))

    def _owner_url(self, tenant, namespace, name, instance):
        owner = self.assigned_worker(tenant, namespace, name, instance)
        if owner is None or owner == self.worker_id:
            return None
        return self.coordinator.members.get(owner)


    async def trigger(self, tenant, namespace, name, value: bytes, topic=None):
        """Pulsar's triggerFunction: ``value`` to ``topic`` (or the only input), the output for
        it back (None when the function has no output topic)."""
        runtime = self._runtime(tenant, namespace, name)
        if self.client is None:
            raise NotSupportedYet("Triggering a function is not supported by this worker")
        inputs = runtime.config.input_topics()
        if topic is None:
            if len(inputs) != 1:
                raise InvalidFunctionConfig("Function has multiple input topics: specify the topic "
                                            "to trigger")
            topic = inputs[0]
        elif topic not in inputs:
            raise InvalidFunctionConfig(f"Function does not consume from topic {topic}")
        if value is None:
            raise InvalidFunctionConfig("Trigger data is not provided")
        return await trigger(self.client, self.clock, topic, runtime.config.output, value)

    # ---------------------------------------------------------------- views
    async def _instance_status(self, runtime, i) -> dict:
        supervisor = runtime.supervisors.get(i)
        if supervisor is not None:
            return supervisor.status(self.worker_id)
        config = runtime.config
        owner = self.assigned_worker(config.tenant, config.namespace, config.name, i) or ""
        url = self._owner_url(config.tenant, config.namespace, config.name, i)
        if url is None:
            return _absent_status("not assigned to a live worker yet" if not owner
                                  else f"instance not started yet on {owner}", owner)
        try:
            return await self.forwarder.call(url, "GET", function_path(
                config.tenant, config.namespace, config.name, f"/{i}/status"))
        except FunctionsError as e:
            return _absent_status(f"worker {owner}: {e}", owner)

    async def _instance_stats(self, runtime, i) -> dict:
        supervisor = runtime.supervisors.get(i)
        if supervisor is not None:
            return supervisor.stats()
        config = runtime.config
        url = self._owner_url(config.tenant, config.namespace, config.name, i)
        if url is not None:
            try:
                return await self.forwarder.call(url, "GET", function_path(
                    config.tenant, config.namespace, config.name, f"/{i}/stats"))
            except FunctionsError as e:
                self.log.warn("stats of {fn}:{i}: {e}", fn=config.fqfn, i=i, e=e)
        return InstanceSupervisor("", 0, None, None).stats()

    async def status(self, tenant, namespace, name) -> dict:
        """Pulsar's ``FunctionStatus``: every instance's, asked of the worker running it."""
        runtime = self._runtime(tenant, namespace, name)
        instances = [{"instanceId": i, "status": await self._instance_status(runtime, i)}
                     for i in range(runtime.config.parallelism)]
        return {"numInstances": len(instances),
                "numRunning": sum(1 for i in instances if i["status"]["running"]),
                "instances": instances}

    async def instance_status(self, tenant, namespace, name, instance: int) -> dict:
        runtime = self._runtime(tenant, namespace, name)
        return await self._instance_status(runtime, self._instances(runtime, instance)[0])

    async def stats(self, tenant, namespace, name) -> dict:
        """Pulsar's ``FunctionStatsImpl``: totals over instances and per instance."""
        runtime = self._runtime(tenant, namespace, name)
        per = [{"instanceId": i, "metrics": await self._instance_stats(runtime, i)}
               for i in range(runtime.config.parallelism)]
        return function_stats(per)

    async def instance_stats(self, tenant, namespace, name, instance: int) -> dict:
        runtime = self._runtime(tenant, namespace, name)
        return await self._instance_stats(runtime, self._instances(runtime, instance)[0])

    # ---------------------------------------------------------------- state
    async def get_state(self, tenant, namespace, name, key) -> dict:
        """Pulsar's ``FunctionState`` JSON (404 for an absent key)."""
        self._runtime(tenant, namespace, name)
        state = await self.store.get_state(tenant, namespace, name, key)
        if state is None:
            raise FunctionNotFound(f"key '{key}' doesn't exist.")
        answer = {"key": key, "version": state["version"]}
        if state["counter"] is not None:
            answer["numberValue"] = state["counter"]
        else:
            try:
                answer["stringValue"] = state["value"].decode("utf-8")
            except UnicodeDecodeError:
                answer["byteValue"] = base64.b64encode(state["value"]).decode()
        return answer

    async def put_state(self, tenant, namespace, name, key, state: dict) -> None:
        """Pulsar's putFunctionState: ``stringValue``, ``byteValue`` (base64) or ``numberValue``."""
        self._runtime(tenant, namespace, name)
        if not isinstance(state, dict):
            raise InvalidFunctionConfig("Invalid state: a FunctionState JSON object is expected")
        if state.get("key") not in (None, key):
            raise InvalidFunctionConfig("Keys mismatch")
        if state.get("numberValue") is not None:
            current = await self.store.get_state(tenant, namespace, name, key)
            base = current["counter"] or 0 if current else 0
            await self.store.incr_counter(tenant, namespace, name, key, int(state["numberValue"]) - base)
        elif state.get("byteValue") is not None:
            await self.store.put_state(tenant, namespace, name, key, base64.b64decode(state["byteValue"]))
        elif state.get("stringValue") is not None:
            await self.store.put_state(tenant, namespace, name, key, state["stringValue"].encode())
        else:
            raise InvalidFunctionConfig("Invalid state: no value given")

    async def incr_counter(self, tenant, namespace, name, key, amount: int) -> int:
        self._runtime(tenant, namespace, name)
        return await self.store.incr_counter(tenant, namespace, name, key, amount)

    async def delete_state(self, tenant, namespace, name, key) -> None:
        self._runtime(tenant, namespace, name)
        await self.store.delete_state(tenant, namespace, name, key)

    # ---------------------------------------------------------------- internals
    def _runtime(self, tenant, namespace, name) -> FunctionRuntime:
        runtime = self.functions.get((tenant, namespace, name))
        if runtime is None:
            raise FunctionNotFound(f"Function {name} doesn't exist")
        return runtime

    @staticmethod
    def _instances(runtime, instance) -> list:
        count = runtime.config.parallelism
        if instance is None:
            return list(range(count))
        if not 0 <= instance < count:
            raise InvalidFunctionConfig(f"Invalid instance id {instance}: the function has "
                                        f"{count} instances")
        return [instance]

    async def _checked_config(self, tenant, namespace, name, config_json) -> FunctionConfig:
        if not isinstance(config_json, dict):
            raise InvalidFunctionConfig("Function config is not provided")
        for field, value in (("tenant", tenant), ("namespace", namespace), ("name", name)):
            if config_json.get(field) not in (None, value):
                raise InvalidFunctionConfig(f"Function {field} in the config ({config_json[field]}) "
                                            f"differs from the path ({value})")
        config = FunctionConfig.from_json(dict(config_json, tenant=tenant, namespace=namespace,
                                               name=name))
        config.validate()
        if await self.metadata.exists(tenant_path(tenant)) is None:
            raise InvalidFunctionConfig(f"Tenant {tenant} does not exist")
        if await self.metadata.exists(namespace_path(f"{tenant}/{namespace}")) is None:
            raise InvalidFunctionConfig(f"Namespace {tenant}/{namespace} does not exist")
        return config

    def _directory(self, config) -> str:
        return os.path.join(self.download_directory, config.tenant, config.namespace, config.name)

    def _write_files(self, runtime, package: bytes) -> None:
        """The package and the instance spec on local disk, where instances read them."""
        config = runtime.config
        directory = self._directory(config)
        os.makedirs(directory, exist_ok=True)
        given = os.path.basename(config.py or "")
        if package[:4] == ZIP_MAGIC and given.endswith(".whl"):
            # A wheel (a zip too): its file name carries the distribution's name and tags.
            code_path = os.path.join(directory, given)
        elif package[:4] == ZIP_MAGIC:
            # Pulsar's layout names the folder inside after the archive: keep the name given.
            code_path = os.path.join(directory, given if given.endswith(".zip") else "package.zip")
        else:
            module = (config.className or "function").rpartition(".")[0] or config.className
            code_path = os.path.join(directory, f"{module}.py")
        with open(code_path, "wb") as f:
            f.write(package)
        spec = {"functionConfig": config.to_json(), "codePath": code_path,
                "serviceUrl": self.service_url, "webServiceUrl": self.web_service_url,
                "functionId": config.fqfn, "functionVersion": str(runtime.record["version"]),
                **self.instance_credentials}
        write_spec(os.path.join(directory, "instance.json"), spec)
