"""
``FunctionConfig``: Pulsar's function configuration, as the admin API v3 receives it in the
``functionConfig`` part of a create/update (the JSON of Pulsar's
``org.apache.pulsar.common.functions.FunctionConfig``, same field names), and its validation with
Pulsar's messages (``FunctionConfigUtils.doCommonChecks``).

Fields are kept as a plain dict of the JSON fields we know; unknown fields are refused (a setting
somebody believes is in force must not be silently dropped), and fields Pulsar has but this slice
does not run (windowing, Java/Go runtimes, EFFECTIVELY_ONCE) are refused with 501 by ``validate``.
"""

import copy

from pulsar_twisted.common.naming import InvalidTopicNameError, parse_topic
from pulsar_twisted.functions.errors import InvalidFunctionConfig, NotSupportedYet

GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE", "MANUAL")
RUNTIMES = ("PYTHON", "JAVA", "GO")
POSITIONS = ("Latest", "Earliest")

#: field -> default (None: absent). Pulsar's names; the defaults Pulsar's worker applies.
FIELDS = {
    "tenant": None, "namespace": None, "name": None, "className": None,
    "inputs": None, "topicsPattern": None, "customSerdeInputs": None, "customSchemaInputs": None,
    "inputSpecs": None, "output": None, "outputSerdeClassName": None, "outputSchemaType": None,
    "logTopic": None, "logLevel": None, "processingGuarantees": "ATLEAST_ONCE",
    "retainOrdering": False, "retainKeyOrdering": False, "forwardSourceMessageProperty": True,
    "userConfig": None, "secrets": None, "runtime": "PYTHON", "autoAck": True,
    "maxMessageRetries": None, "deadLetterTopic": None, "subName": None, "parallelism": 1,
    "resources": None, "fqfn": None, "windowConfig": None, "timeoutMs": None, "jar": None,
    "py": None, "go": None, "cleanupSubscription": True, "subscriptionPosition": "Latest",
    "runtimeFlags": None, "producerConfig": None, "customRuntimeOptions": None,
    "batchBuilder": None, "exposePulsarAdminClientEnabled": None, "skipToLatest": None,
    "subscriptionType": None,
}

#: What ``validateUpdate`` refuses to change (Pulsar's messages).
_IMMUTABLE = (
    ("processingGuarantees", "Processing Guarantees cannot be altered"),
    ("retainOrdering", "Retain Ordering cannot be altered"),
    ("retainKeyOrdering", "Retain Key Ordering cannot be altered"),
    ("runtime", "Runtime cannot be altered"),
    ("autoAck", "AutoAck cannot be altered"),
    ("subName", "Subscription Name cannot be altered"),
)

#: What an update may change.
_UPDATABLE = ("className", "py", "output", "logTopic", "logLevel", "userConfig", "secrets",
              "maxMessageRetries", "deadLetterTopic", "parallelism", "resources", "timeoutMs",
              "runtimeFlags")


class ConfigRecord:
    """A configuration document as Pulsar's JSON has it: ``fields`` by Pulsar's names, read as
    attributes (``config.parallelism``); shared by functions, sources and sinks."""

    def __init__(self, fields: dict):
        self.fields = fields

    def to_json(self) -> dict:
        """The JSON Pulsar's ``get`` prints: null fields left out, as its Jackson output does."""
        return {k: v for k, v in self.fields.items() if v is not None}

    def __getattr__(self, name):
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name)


class FunctionConfig(ConfigRecord):
    """One function's configuration: ``fields`` holds every known field (defaults filled)."""

    def __init__(self, fields: dict, given=frozenset()):
        super().__init__(fields)
        #: The fields the user set (an update changes only those).
        self.given = frozenset(given)

    @classmethod
    def from_json(cls, data) -> "FunctionConfig":
        """From the decoded ``functionConfig`` JSON (InvalidFunctionConfig for a non-object or an
        unknown field); defaults are filled for absent and null fields."""
        if not isinstance(data, dict):
            raise InvalidFunctionConfig("Function config is not provided")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise InvalidFunctionConfig(f"Unrecognized field(s) in functionConfig: {', '.join(unknown)}")
        fields = {k: copy.deepcopy(v) for k, v in FIELDS.items()}
        given = {k for k, v in data.items() if v is not None}
        fields.update({k: data[k] for k in given})
        return cls(fields, given)


    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    def input_topics(self) -> list:
        """Every input (Pulsar's ``collectAllInputTopics``): inputs, the custom serde/schema keys,
        the inputSpecs keys, then the pattern."""
        topics = list(self.inputs or [])
        for mapping in (self.customSerdeInputs, self.customSchemaInputs, self.inputSpecs):
            topics += [t for t in (mapping or {}) if t not in topics]
        return topics

    def subscription_name(self) -> str:
        """``subName``, else Pulsar's default ``tenant/namespace/name``."""
        return self.subName or self.fqfn

    def validate(self) -> None:
        """Pulsar's checks, in its order, with its messages (InvalidFunctionConfig), then the
        parts this slice does not run (NotSupportedYet)."""
        _common_checks(self)
        _slice_checks(self)

    def merged_with(self, update: "FunctionConfig") -> "FunctionConfig":
        """Pulsar's ``validateUpdate``: the fields the update sets replace ours; names, inputs and
        the immutable fields must agree."""
        for field, what in (("tenant", "Tenants"), ("namespace", "Namespaces"),
                            ("name", "Function Names")):
            if update.fields[field] != self.fields[field]:
                raise InvalidFunctionConfig(f"{what} differ")
        for field, message in _IMMUTABLE:
            if field in update.given and update.fields[field] != self.fields[field]:
                raise InvalidFunctionConfig(message)
        if set(update.input_topics()) - set(self.input_topics()):
            raise InvalidFunctionConfig("Input Topics cannot be altered")
        merged = dict(self.fields)
        merged.update({field: update.fields[field] for field in _UPDATABLE if field in update.given})
        return FunctionConfig(merged, self.given | (update.given & set(_UPDATABLE)))


def _valid_topic(name) -> bool:
    if not isinstance(name, str) or not name:
        return False
    try:
        parse_topic(name)
    except (InvalidTopicNameError, ValueError):
        return False
    return True


def _topic_checks(c: FunctionConfig) -> None:
    if not c.input_topics() and not c.topicsPattern:
        raise InvalidFunctionConfig("No input topic(s) specified for the function")
    for topic in c.input_topics():
        if not _valid_topic(topic):
            raise InvalidFunctionConfig(f"Input topic {topic} is invalid")
    for field, what in (("output", "Output topic"), ("logTopic", "LogTopic topic"),
                        ("deadLetterTopic", "DeadLetter topic")):
        if c.fields[field] and not _valid_topic(c.fields[field]):
            raise InvalidFunctionConfig(f"{what} {c.fields[field]} is invalid")


def _common_checks(c: FunctionConfig) -> None:
    for field in ("tenant", "namespace", "name"):
        if not c.fields[field]:
            raise InvalidFunctionConfig(f"Function {field} cannot be null")
    if c.runtime not in RUNTIMES:
        raise InvalidFunctionConfig("Function language runtime is either not set or cannot be determined")
    if c.runtime == "PYTHON" and not c.className:
        raise InvalidFunctionConfig("Function classname cannot be null")
    _topic_checks(c)
    if not isinstance(c.parallelism, int) or c.parallelism <= 0:
        raise InvalidFunctionConfig("Function parallelism must be a positive number")
    if c.output and c.output in c.input_topics():
        raise InvalidFunctionConfig(f"Output topic {c.output} is also being used as an input topic "
                                    "(topics must be one or the other)")
    if c.processingGuarantees not in GUARANTEES:
        raise InvalidFunctionConfig(f"Invalid processingGuarantees {c.processingGuarantees}: "
                                    f"one of {', '.join(GUARANTEES)}")
    if c.timeoutMs is not None and c.timeoutMs <= 0:
        raise InvalidFunctionConfig("Function timeout must be a positive number")
    if c.timeoutMs is not None and c.processingGuarantees != "ATLEAST_ONCE":
        raise InvalidFunctionConfig("Message timeout can only be specified with processing "
                                    "guarantee is ATLEAST_ONCE")
    retries = c.maxMessageRetries
    if retries is not None and retries >= 0 and c.processingGuarantees == "EFFECTIVELY_ONCE":
        raise InvalidFunctionConfig("MaxMessageRetries and Effectively once don't gel well")
    if (retries is None or retries < 0) and c.deadLetterTopic:
        raise InvalidFunctionConfig("Dead Letter Topic specified, however max retries is set to infinity")
    if c.retainKeyOrdering and c.retainOrdering:
        raise InvalidFunctionConfig("Only one of retain ordering or retain key ordering can be set")
    if c.subscriptionPosition not in POSITIONS:
        raise InvalidFunctionConfig(f"Invalid subscriptionPosition {c.subscriptionPosition}: "
                                    "Latest or Earliest")
    if c.userConfig is not None and not isinstance(c.userConfig, dict):
        raise InvalidFunctionConfig("userConfig must be a JSON object")


def _slice_checks(c: FunctionConfig) -> None:
    """What Pulsar accepts but this implementation does not run yet: a clear 501, never a function
    that silently behaves otherwise."""
    if c.runtime != "PYTHON":
        raise NotSupportedYet(f"Runtime {c.runtime} is not supported yet: only PYTHON functions run here")
    for field, what in (("windowConfig", "Window functions"), ("topicsPattern", "topicsPattern inputs"),
                        ("retainKeyOrdering", "retainKeyOrdering (Key_Shared)")):
        if c.fields[field]:
            raise NotSupportedYet(f"{what} are not supported yet" if field != "retainKeyOrdering"
                                  else f"{what} is not supported yet")

