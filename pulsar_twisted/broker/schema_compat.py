"""
Avro schema resolution, as the Avro specification's "Schema Resolution" section states it, at the
level of schemas: can *every* datum written with a writer schema be read with a reader schema?

Pulsar checks AVRO and JSON schemas (a JSON schema's definition is an Avro record too) with Avro's
``SchemaValidator``: BACKWARD is "the new schema can read the old", FORWARD "the old can read the
new", FULL both. This module answers the reader/writer question; ``broker/schema.py`` applies the
strategies over a topic's versions. Pure: no Twisted, no I/O.

The rules (reader R, writer W):

* primitives match themselves and Avro's promotions: int -> long, float, double; long -> float,
  double; float -> double; string <-> bytes. Logical types resolve as their underlying type;
* records match when their unqualified names are equal (or W's name is one of R's aliases); each
  field of R takes the field of W with its name or one of its aliases, else it needs a default;
  fields of W that R lacks are skipped;
* enums: same name; every symbol of W must be in R, unless R has a default symbol;
* fixed: same name and same size; arrays by items; maps by values;
* a union W matches when each of its branches matches R (a datum may use any of them); a union R
  matches a non-union W when one of its branches does.

A schema-level check is stricter than reading one datum (fastavro reads a ``["null", "string"]``
writer with a ``"string"`` reader as long as no null comes): that is what Avro's
``SchemaCompatibility`` and hence Pulsar answer, because the check must hold for every future datum.
"""

import json

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
#: Writer type -> the reader types that may read it (Avro's promotions).
PROMOTIONS = {"int": {"int", "long", "float", "double"}, "long": {"long", "float", "double"},
              "float": {"float", "double"}, "string": {"string", "bytes"},
              "bytes": {"bytes", "string"}}


class InvalidAvroSchema(ValueError):
    """The schema definition does not parse as an Avro schema."""


class AvroSchema:
    """
    A parsed Avro schema: the JSON tree with every named type registered by its full name (and
    its unqualified name as a fallback), so references by name resolve.
    """

    def __init__(self, obj):
        self.names = {}
        self.root = self._collect(obj, "")
        self._verify(self.root, set())

    @classmethod
    def parse(cls, data: bytes) -> "AvroSchema":
        """The schema in ``data`` (UTF-8 JSON); InvalidAvroSchema when it is not one."""
        try:
            obj = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidAvroSchema(f"Invalid Avro schema definition: {e}") from None
        return cls(obj)

    def _collect(self, node, namespace):
        if isinstance(node, list):
            return [self._collect(n, namespace) for n in node]
        if isinstance(node, str):
            return node
        if not isinstance(node, dict) or "type" not in node:
            raise InvalidAvroSchema(f"Invalid Avro schema node {node!r}")
        kind = node["type"]
        if isinstance(kind, (dict, list)):
            return self._collect(kind, namespace)
        if kind in NAMED:
            return self._collect_named(node, namespace)
        if kind == "array":
            node["items"] = self._collect(node.get("items"), namespace)
        elif kind == "map":
            node["values"] = self._collect(node.get("values"), namespace)
        elif kind not in PRIMITIVES:
            return kind  # {"type": "some.Name"}: a reference to a named type
        return node

    def _collect_named(self, node, namespace):
        kind, name = node["type"], node.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidAvroSchema(f"Avro {kind} without a name")
        full = full_name(name, node.get("namespace", namespace))
        node["_full"] = full
        self.names[full] = node
        self.names.setdefault(full.rsplit(".", 1)[-1], node)
        if kind == "enum" and not isinstance(node.get("symbols"), list):
            raise InvalidAvroSchema(f"Avro enum {name} without symbols")
        if kind == "fixed" and not isinstance(node.get("size"), int):
            raise InvalidAvroSchema(f"Avro fixed {name} without a size")
        if kind in ("record", "error"):
            fields = node.get("fields")
            if not isinstance(fields, list):
                raise InvalidAvroSchema(f"Avro record {name} without fields")
            child_ns = full.rsplit(".", 1)[0] if "." in full else ""
            for f in fields:
                if not isinstance(f, dict) or "name" not in f or "type" not in f:
                    raise InvalidAvroSchema(f"Invalid field in record {name}")
                f["type"] = self._collect(f["type"], child_ns)
        return node

    def _verify(self, node, seen) -> None:
        """Every reference names a primitive or a defined type (else InvalidAvroSchema)."""
        node = self.resolve(node)
        if isinstance(node, list):
            for branch in node:
                self._verify(branch, seen)
        elif isinstance(node, dict) and id(node) not in seen:
            seen.add(id(node))
            kind = node["type"]
            if kind in ("record", "error"):
                for f in node["fields"]:
                    self._verify(f["type"], seen)
            elif kind == "array":
                self._verify(node["items"], seen)
            elif kind == "map":
                self._verify(node["values"], seen)

    def resolve(self, node):
        """``node`` with a name reference replaced by its definition and ``{"type": "int"}``
        (possibly with a logicalType) reduced to ``"int"``."""
        if isinstance(node, str):
            if node in PRIMITIVES:
                return node
            found = self.names.get(node) or self.names.get(node.rsplit(".", 1)[-1])
            if found is None:
                raise InvalidAvroSchema(f"Unknown Avro type {node}")
            return found
        if isinstance(node, dict) and node.get("type") in PRIMITIVES:
            return node["type"]
        return node


def full_name(name: str, namespace) -> str:
    """Avro's full name: a dotted name is already full, else it is qualified by the namespace."""
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def kind_of(node) -> str:
    """The Avro type of a resolved node ("union" for a list)."""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "union"
    return node["type"]


class _Resolution:
    """One reader/writer comparison; ``seen`` stops recursion through recursive record types."""

    def __init__(self, reader: AvroSchema, writer: AvroSchema):
        self.reader = reader
        self.writer = writer
        self.seen = set()

    def mismatch(self, r, w, path):
        """None when every datum of ``w`` reads as ``r``, else the reason (with its path)."""
        r, w = self.reader.resolve(r), self.writer.resolve(w)
        rk, wk = kind_of(r), kind_of(w)
        if wk == "union":
            for branch in w:
                reason = self.mismatch(r, branch, path)
                if reason is not None:
                    return reason
            return None
        if rk == "union":
            if any(self.mismatch(branch, w, path) is None for branch in r):
                return None
            return f"{path}: no branch of the reader's union reads the writer's {_label(w)}"
        if rk in PRIMITIVES or wk in PRIMITIVES:
            if rk == wk or rk in PROMOTIONS.get(wk, ()):
                return None
            return f"{path}: the writer's {_label(w)} cannot be read as {_label(r)}"
        if rk != wk and not {rk, wk} <= {"record", "error"}:
            return f"{path}: the writer's {_label(w)} cannot be read as {_label(r)}"
        return self._COMPARE[rk](self, r, w, path)

    def _names_match(self, r, w, path):
        writer_short = w["_full"].rsplit(".", 1)[-1]
        if r["_full"].rsplit(".", 1)[-1] == writer_short:
            return None
        namespace = r["_full"].rsplit(".", 1)[0] if "." in r["_full"] else ""
        for alias in r.get("aliases") or ():
            if full_name(alias, namespace) == w["_full"] or alias.rsplit(".", 1)[-1] == writer_short:
                return None
        return f"{path}: the writer's {w['type']} {w['_full']} is not the reader's {r['_full']}"

    def _record(self, r, w, path):
        reason = self._names_match(r, w, path)
        if reason is not None:
            return reason
        key = (id(r), id(w))
        if key in self.seen:  # a recursive type already being compared
            return None
        self.seen.add(key)
        writer_fields = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            names = [f["name"], *(f.get("aliases") or ())]
            match = next((writer_fields[n] for n in names if n in writer_fields), None)
            where = f"{path}.{f['name']}"
            if match is None:
                if "default" not in f:
                    return f"{where}: the reader's field has no default and the writer lacks it"
                continue
            reason = self.mismatch(f["type"], match["type"], where)
            if reason is not None:
                return reason
        return None

    def _enum(self, r, w, path):
        reason = self._names_match(r, w, path)
        if reason is not None or "default" in r:
            return reason
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing:
            return f"{path}: the reader's enum {r['_full']} lacks the symbols {missing} and has no default"
        return None

    def _fixed(self, r, w, path):
        reason = self._names_match(r, w, path)
        if reason is None and r["size"] != w["size"]:
            reason = f"{path}: fixed {r['_full']} of size {w['size']} read as size {r['size']}"
        return reason

    def _array(self, r, w, path):
        return self.mismatch(r["items"], w["items"], f"{path}[]")

    def _map(self, r, w, path):
        return self.mismatch(r["values"], w["values"], f"{path}{{}}")

    _COMPARE = {"record": _record, "error": _record, "enum": _enum, "fixed": _fixed,
                "array": _array, "map": _map}


def _label(node) -> str:
    kind = kind_of(node)
    if kind in NAMED:
        return f"{kind} {node['_full']}"
    return kind


def read_mismatch(reader: AvroSchema, writer: AvroSchema):
    """None when ``reader`` can read every datum written with ``writer``, else why not."""
    return _Resolution(reader, writer).mismatch(reader.root, writer.root, "$")


def can_read(reader: AvroSchema, writer: AvroSchema) -> bool:
    """Avro schema resolution: can every datum written with ``writer`` be read with ``reader``?"""
    return read_mismatch(reader, writer) is None
