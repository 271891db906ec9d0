"""
``FunctionsWorker``: the functions worker's decisions. It keeps every function's record in the
``FunctionStore`` (on the platform), writes each function's package and instance spec under
``download_directory``, and runs ``parallelism`` ``InstanceSupervisor``s per function. A worker
started on the same store rebuilds everything from it (``start``), so functions survive a worker
(and standalone) restart.

This slice runs every instance on this one worker: Pulsar's assignment topic and leader election
(several workers sharing instances) come later. Errors are ``errors.FunctionsError`` with the HTTP
status Pulsar's worker answers; the web layer only translates.
"""

import json
import os
import time

from twisted.internet import defer
from twisted.logger import Logger

from pulsar_twisted.functions.config import FunctionConfig
from pulsar_twisted.functions.errors import (
    FunctionExists, FunctionNotFound, InvalidFunctionConfig, NotSupportedYet)
from pulsar_twisted.functions.io_worker import ConnectorsManager
from pulsar_twisted.functions.store import FunctionStore
from pulsar_twisted.functions.supervisor import InstanceSupervisor, apply_running
from pulsar_twisted.functions.trigger import trigger
from pulsar_twisted.metadata.layout import namespace_path, tenant_path


#: A .zip package (Pulsar's ``name/src``, ``name/requirements.txt``, ``name/deps/*.whl``).
ZIP_MAGIC = b"PK\x03\x04"


class FunctionRuntime:
    """One registered function on this worker: its config, record and supervisors."""

    def __init__(self, config: FunctionConfig, record: dict):
        self.config = config
        self.record = record
        self.supervisors = []


class FunctionsWorker:
    """See the module docstring. ``launcher(spec_path, instance_id)`` returns the ``launch``
    callable of one instance (``runtime.ProcessLauncher``, or a fake in tests)."""

    log = Logger()

    def __init__(self, store, clock, launcher, service_url: str, web_service_url: str,
                 download_directory: str, worker_id: str = "standalone", cleaner=None,
                 client=None):
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
        #: A ``pulsar_twisted.client.Client`` on the cluster (``trigger``); None: 501.
        self.client = client
        self.functions = {}
        #: Pulsar IO: the sources and sinks this worker runs (``io_worker.py``).
        self.sources = ConnectorsManager("source", self)
        self.sinks = ConnectorsManager("sink", self)

    # ---------------------------------------------------------------- life
    async def start(self) -> None:
        """Rebuild every function from the store and start its instances (not the stopped ones)."""
        for tenant, namespace, name, record in await self.store.load_all():
            config = FunctionConfig.from_json(record["functionConfig"])
            package = await self.store.get_package(tenant, namespace, name)
            runtime = FunctionRuntime(config, record)
            self.functions[(tenant, namespace, name)] = runtime
            self._write_files(runtime, package or b"")
            self._scale(runtime)
        await self.sources.start()
        await self.sinks.start()
        self.log.info("functions worker {worker} started {count} functions, {sources} sources, "
                      "{sinks} sinks", worker=self.worker_id, count=len(self.functions),
                      sources=len(self.sources.connectors), sinks=len(self.sinks.connectors))

    def stop(self, grace: float = 5.0):
        """Stop every instance (SIGTERM, SIGKILL after ``grace`` seconds); the functions stay
        registered on the platform. A Deferred firing once every instance has exited."""
        return defer.gatherResults([supervisor.shutdown(grace) for runtime in self.functions.values()
                                    for supervisor in runtime.supervisors]
                                   + [self.sources.stop(grace), self.sinks.stop(grace)])

    # ---------------------------------------------------------------- management
    async def register(self, tenant, namespace, name, config_json, package: bytes) -> None:
        """Pulsar's registerFunction: 400 when it exists or the config is invalid."""
        config = await self._checked_config(tenant, namespace, name, config_json)
        if (tenant, namespace, name) in self.functions:
            raise FunctionExists(f"Function {name} already exists", 400)
        if not package:
            raise InvalidFunctionConfig("Function package is not provided")
        record = {"functionConfig": config.to_json(), "version": 0,
                  "createTime": int(time.time() * 1000), "packageSize": len(package), "stopped": []}
        await self.store.put_package(tenant, namespace, name, package)
        await self.store.put_record(tenant, namespace, name, record)
        runtime = FunctionRuntime(config, record)
        self.functions[(tenant, namespace, name)] = runtime
        self._write_files(runtime, package)
        self._scale(runtime)

    async def update(self, tenant, namespace, name, config_json, package) -> None:
        """Pulsar's updateFunction: the given fields change, then every instance restarts."""
        runtime = self._runtime(tenant, namespace, name)
        update = FunctionConfig.from_json(dict(config_json or {}, tenant=tenant,
                                               namespace=namespace, name=name))
        config = runtime.config.merged_with(update)
        config.validate()
        if package:
            await self.store.put_package(tenant, namespace, name, package)
        else:
            package = await self.store.get_package(tenant, namespace, name) or b""
        record = dict(runtime.record, functionConfig=config.to_json(),
                      version=runtime.record["version"] + 1, packageSize=len(package))
        await self.store.put_record(tenant, namespace, name, record)
        runtime.config, runtime.record = config, record
        self._write_files(runtime, package)
        for supervisor in runtime.supervisors:
            supervisor.stop()
        runtime.supervisors = []
        self._scale(runtime)

    async def deregister(self, tenant, namespace, name) -> None:
        """Pulsar's deregisterFunction: instances stopped, records gone, and with
        ``cleanupSubscription`` the input subscription deleted."""
        runtime = self._runtime(tenant, namespace, name)
        del self.functions[(tenant, namespace, name)]
        await defer.gatherResults([s.shutdown() for s in runtime.supervisors])
        await self.store.delete_function(tenant, namespace, name)
        config = runtime.config
        if config.cleanupSubscription and self.cleaner is not None:
            await self.cleaner.delete(config.input_topics(), config.subscription_name())

    def get(self, tenant, namespace, name) -> dict:
        return self._runtime(tenant, namespace, name).config.to_json()

    def list(self, tenant, namespace) -> list:
        return sorted(n for (t, ns, n) in self.functions if (t, ns) == (tenant, namespace))

    async def set_running(self, tenant, namespace, name, running: bool, instance=None,
                          restart: bool = False) -> None:
        """start/stop/restart of one instance or all (stopped instances stay stopped across a
        worker restart: the record keeps them)."""
        runtime = self._runtime(tenant, namespace, name)
        chosen = self._instances(runtime, instance)
        await apply_running(runtime, chosen, running, restart,
                            lambda record: self.store.put_record(tenant, namespace, name, record))

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
    def status(self, tenant, namespace, name) -> dict:
        """Pulsar's ``FunctionStatus``."""
        runtime = self._runtime(tenant, namespace, name)
        instances = [{"instanceId": s.instance_id, "status": s.status(self.worker_id)}
                     for s in runtime.supervisors]
        return {"numInstances": len(instances),
                "numRunning": sum(1 for i in instances if i["status"]["running"]),
                "instances": instances}

    def instance_status(self, tenant, namespace, name, instance: int) -> dict:
        runtime = self._runtime(tenant, namespace, name)
        return runtime.supervisors[self._instances(runtime, instance)[0]].status(self.worker_id)

    def stats(self, tenant, namespace, name) -> dict:
        """Pulsar's ``FunctionStatsImpl``: totals over instances and per instance."""
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
        return runtime.supervisors[self._instances(runtime, instance)[0]].stats()

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
                import base64
                answer["byteValue"] = base64.b64encode(state["value"]).decode()
        return answer

    async def put_state(self, tenant, namespace, name, key, state: dict) -> None:
        """Pulsar's putFunctionState: ``stringValue``, ``byteValue`` (base64) or ``numberValue``."""
        import base64
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
        if instance is None:
            return list(range(len(runtime.supervisors)))
        if not 0 <= instance < len(runtime.supervisors):
            raise InvalidFunctionConfig(f"Invalid instance id {instance}: the function has "
                                        f"{len(runtime.supervisors)} instances")
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
        if package[:4] == ZIP_MAGIC:
            # Pulsar's layout names the folder inside after the archive: keep the name given.
            given = os.path.basename(config.py or "")
            code_path = os.path.join(directory, given if given.endswith(".zip") else "package.zip")
        else:
            module = (config.className or "function").rpartition(".")[0] or config.className
            code_path = os.path.join(directory, f"{module}.py")
        with open(code_path, "wb") as f:
            f.write(package)
        spec = {"functionConfig": config.to_json(), "codePath": code_path,
                "serviceUrl": self.service_url, "webServiceUrl": self.web_service_url,
                "functionId": config.fqfn, "functionVersion": str(runtime.record["version"])}
        with open(os.path.join(directory, "instance.json"), "w") as f:
            json.dump(spec, f)

    def _scale(self, runtime) -> None:
        """``parallelism`` supervisors, each started unless its instance is recorded stopped."""
        config = runtime.config
        spec_path = os.path.join(self._directory(config), "instance.json")
        stopped = set(runtime.record.get("stopped", []))
        runtime.supervisors = [InstanceSupervisor(config.fqfn, i, self.launcher(spec_path, i), self.clock)
                               for i in range(config.parallelism)]
        for supervisor in runtime.supervisors:
            if supervisor.instance_id not in stopped:
                supervisor.start()
