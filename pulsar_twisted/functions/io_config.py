"""
``SourceConfig`` and ``SinkConfig``: Pulsar IO's connector configurations, as the admin API v3
receives them in the ``sourceConfig``/``sinkConfig`` part of a create (the JSON of Pulsar's
``org.apache.pulsar.common.io.SourceConfig``/``SinkConfig``, same field names), and their checks.

This slice runs the built-in connectors only (``archive: "builtin://<type>"``, see
``connectors.py``); an uploaded archive or a ``className`` of one's own answers 501, as do the
fields Pulsar has but nothing here runs yet (batch sources, transform functions, patterns).
"""

import copy

from pulsar_twisted.functions.config import GUARANTEES, POSITIONS, ConfigRecord, _valid_topic
from pulsar_twisted.functions.connectors import BUILTIN_SINKS, BUILTIN_SOURCES
from pulsar_twisted.functions.errors import InvalidFunctionConfig, NotSupportedYet

BUILTIN = "builtin://"

_COMMON = {
    "tenant": None, "namespace": None, "name": None, "className": None, "configs": None,
    "secrets": None, "parallelism": 1, "processingGuarantees": "ATLEAST_ONCE", "resources": None,
    "archive": None, "runtimeFlags": None, "customRuntimeOptions": None, "logTopic": None,
}

#: Pulsar's SourceConfig fields -> default.
SOURCE_FIELDS = dict(_COMMON, topicName=None, producerConfig=None, serdeClassName=None,
                     schemaType=None, batchSourceConfig=None, batchBuilder=None)

#: Pulsar's SinkConfig fields -> default.
SINK_FIELDS = dict(_COMMON, sourceSubscriptionName=None, sourceSubscriptionPosition="Latest",
                   inputs=None, topicToSerdeClassName=None, topicsPattern=None,
                   topicToSchemaType=None, topicToSchemaProperties=None, inputSpecs=None,
                   maxMessageRetries=None, deadLetterTopic=None, retainOrdering=False,
                   retainKeyOrdering=False, autoAck=True, timeoutMs=None,
                   negativeAckRedeliveryDelayMs=None, cleanupSubscription=True,
                   transformFunction=None, transformFunctionClassName=None,
                   transformFunctionConfig=None)

#: Fields Pulsar has that this slice refuses with 501 when set.
_NOT_YET = ("batchSourceConfig", "topicsPattern", "transformFunction", "retainKeyOrdering")


class ConnectorConfig(ConfigRecord):
    """One source's or sink's configuration: ``fields`` holds every known field (defaults
    filled). ``kind`` is ``"source"`` or ``"sink"``."""

    kind = None
    known = {}
    builtins = {}

    @classmethod
    def from_json(cls, data):
        """From the decoded JSON part (InvalidFunctionConfig for a non-object or an unknown
        field: a setting somebody believes in force must not be dropped)."""
        if not isinstance(data, dict):
            raise InvalidFunctionConfig(f"{cls.kind.capitalize()} config is not provided")
        unknown = sorted(set(data) - set(cls.known))
        if unknown:
            raise InvalidFunctionConfig(f"Unrecognized field(s) in {cls.kind}Config: "
                                        f"{', '.join(unknown)}")
        fields = {k: copy.deepcopy(v) for k, v in cls.known.items()}
        fields.update({k: v for k, v in data.items() if v is not None})
        return cls(fields)

    #: (field, Pulsar's message) an update may not change.
    immutable = (("processingGuarantees", "Processing Guarantees cannot be altered"),)

    def merged_with(self, data: dict) -> "ConnectorConfig":
        """Pulsar's ``SourceConfigUtils``/``SinkConfigUtils.validateUpdate``: the fields the
        update sets (non-null) replace ours, the names and the immutable fields must agree."""
        update = type(self).from_json(data)
        given = {k for k, v in data.items() if v is not None}
        for field, what in (("tenant", "Tenants"), ("namespace", "Namespaces"), ("name", "Names")):
            if update.fields[field] != self.fields[field]:
                raise InvalidFunctionConfig(f"{what} differ")
        for field, message in self.immutable:
            if field in given and update.fields[field] != self.fields[field]:
                raise InvalidFunctionConfig(message)
        merged = dict(self.fields)
        merged.update({k: update.fields[k] for k in given})
        return type(self)(merged)

    @property
    def fqn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    @property
    def builtin_type(self) -> str:
        """The built-in connector's name (``archive`` without ``builtin://``)."""
        return self.archive[len(BUILTIN):]

    def validate(self) -> None:
        what = self.kind.capitalize()
        for field in ("tenant", "namespace", "name"):
            if not self.fields[field]:
                raise InvalidFunctionConfig(f"{what} {field} cannot be null")
        if not isinstance(self.parallelism, int) or self.parallelism <= 0:
            raise InvalidFunctionConfig(f"{what} parallelism must be a positive number")
        if self.processingGuarantees not in GUARANTEES:
            raise InvalidFunctionConfig(f"Invalid processingGuarantees {self.processingGuarantees}")
        if self.configs is not None and not isinstance(self.configs, dict):
            raise InvalidFunctionConfig(f"{self.kind}Config configs must be a JSON object")
        if not self.archive:
            raise InvalidFunctionConfig(f"{what} package is not provided")
        if not self.archive.startswith(BUILTIN):
            raise NotSupportedYet(f"{what} archives other than builtin:// connectors are not "
                                  "supported yet")
        if self.builtin_type not in self.builtins:
            raise InvalidFunctionConfig(f"Built-in {self.kind} is not available: "
                                        f"{self.builtin_type}")
        if self.processingGuarantees == "EFFECTIVELY_ONCE":
            raise NotSupportedYet(f"EFFECTIVELY_ONCE {self.kind}s are not supported yet")
        for field in _NOT_YET:
            if self.fields.get(field):
                raise NotSupportedYet(f"{field} is not supported yet for {self.kind}s")
        self._checks()

    def _checks(self) -> None:
        raise NotImplementedError


class SourceConfig(ConnectorConfig):
    kind = "source"
    known = SOURCE_FIELDS
    builtins = BUILTIN_SOURCES
    immutable = ConnectorConfig.immutable + (("topicName", "Destination topics differ"),)

    #: Built-ins whose records name their own topics (one per table), so ``topicName`` is optional.
    own_topics = ("debezium-postgres",)

    def _checks(self) -> None:
        if self.builtin_type == "debezium-postgres" and self.parallelism != 1:
            # One replication slot has one reader at a time.
            raise InvalidFunctionConfig("debezium-postgres runs one instance (parallelism 1): "
                                        "its replication slot has one reader")
        if not self.topicName:
            if self.builtin_type in self.own_topics:
                return
            raise InvalidFunctionConfig("Topic name cannot be null")
        if not _valid_topic(self.topicName):
            raise InvalidFunctionConfig(f"Topic name {self.topicName} is invalid")


class SinkConfig(ConnectorConfig):
    kind = "sink"
    known = SINK_FIELDS
    builtins = BUILTIN_SINKS
    immutable = ConnectorConfig.immutable + (
        ("retainOrdering", "Retain Ordering cannot be altered"),
        ("autoAck", "AutoAck cannot be altered"),
        ("sourceSubscriptionName", "Subscription Name cannot be altered"))

    def input_topics(self) -> list:
        topics = list(self.inputs or [])
        for mapping in (self.topicToSerdeClassName, self.topicToSchemaType, self.inputSpecs):
            topics += [t for t in (mapping or {}) if t not in topics]
        return topics

    def subscription_name(self) -> str:
        """``sourceSubscriptionName``, else Pulsar's default ``tenant/namespace/name``."""
        return self.sourceSubscriptionName or self.fqn

    def _checks(self) -> None:
        if not self.input_topics():
            raise InvalidFunctionConfig("Must specify at least one topic of input via topicToSerdeClassName, "
                                        "topicsPattern, topicToSchemaType or inputSpecs")
        for topic in self.input_topics():
            if not _valid_topic(topic):
                raise InvalidFunctionConfig(f"Input topic {topic} is invalid")
        if self.sourceSubscriptionPosition not in POSITIONS:
            raise InvalidFunctionConfig(f"Invalid sourceSubscriptionPosition "
                                        f"{self.sourceSubscriptionPosition}: Latest or Earliest")
        retries = self.maxMessageRetries
        if (retries is None or retries < 0) and self.deadLetterTopic:
            raise InvalidFunctionConfig("Dead Letter Topic specified, however max retries is set to infinity")


CONFIGS = {"source": SourceConfig, "sink": SinkConfig}
