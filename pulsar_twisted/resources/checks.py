"""
Checks of JSON values as Pulsar's Jackson mapping accepts them, shared by every metadata document
(Policies, TenantInfo, ClusterData, partitioned-topic metadata). Pure functions, no Twisted.

Two kinds of refusal, because Pulsar answers them differently on the admin API:
``InvalidValue`` (wrong type, missing field, unknown choice; HTTP 400) and ``OutOfRange`` (a
well-formed number below its minimum; HTTP 412). Readers of stored documents catch ``ValueCheckError``
and fall back to their defaults instead.
"""


class ValueCheckError(ValueError):
    """A JSON value that cannot be used; ``str(e)`` names the field."""


class InvalidValue(ValueCheckError):
    """Wrong type, missing field or unknown choice."""


class OutOfRange(ValueCheckError):
    """A number below its minimum."""


def check_int(value, what: str, minimum: int = None) -> int:
    # bool is an int in Python; Pulsar's Jackson refuses true for an int field.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(f"{what} must be an integer")
    if minimum is not None and value < minimum:
        raise OutOfRange(f"{what} must be >= {minimum}")
    return value


def optional_int(data: dict, key: str, default: int, minimum: int = None) -> int:
    """``data[key]`` checked by :func:`check_int`, ``default`` when absent or null."""
    value = data.get(key)
    return default if value is None else check_int(value, key, minimum)


def check_bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidValue(f"{what} must be true or false")
    return value


def check_str(value, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidValue(f"{what} must be a string")
    return value


def check_string_list(value, what: str) -> list:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidValue(f"{what} must be a list of strings")
    return value


def check_choice(value, what: str, choices) -> str:
    """``value`` when it is one of ``choices`` (listed in their own order in the refusal)."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidValue(f"{what} must be one of {list(choices)}")
    return value


def check_object(value, what: str, fields: dict, required=()) -> dict:
    """A JSON object whose known ``fields`` (name -> checker(value, what)) are checked; unknown
    fields are kept, as Pulsar keeps them."""
    if not isinstance(value, dict):
        raise InvalidValue(f"{what} must be a JSON object")
    for name in required:
        if name not in value:
            raise InvalidValue(f"{what}: missing field {name}")
    out = dict(value)
    for name, checker in fields.items():
        if name in value and value[name] is not None:
            out[name] = checker(value[name], f"{what}.{name}")
    return out


def minimum(at_least: int):
    """A checker of integers >= ``at_least`` (for :func:`check_object` field tables)."""
    return lambda value, what: check_int(value, what, at_least)
