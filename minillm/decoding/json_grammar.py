"""A JSON recognizer, byte by byte, that follows a small JSON Schema: the grammar behind
constrained decoding (约束解码, json_constraint.py).

    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    grammar = JSONGrammar(schema)              # None instead of a schema: any JSON object
    state = grammar.feed(grammar.start, b'{"name": "Ann", "ag')   # a valid prefix: a state
    grammar.feed(state, b'x')                  # None: no text that starts so can match
    grammar.is_complete(grammar.feed(state, b'e": 31}'))          # True

The supported schema subset: "type" object (with "properties", "required" and
"additionalProperties"), array (with "items", "minItems" and "maxItems"), string (with
"maxLength", in characters), number, integer, boolean and null;
"enum" of strings, numbers, booleans and null, and "const"; "anyOf" whose alternatives begin
with different characters (Optional[X] is anyOf X and null: the first byte says which); "$ref" to
a place in the same schema ("#/$defs/Name", as Pydantic writes), not recursive; and annotations
that change nothing ("title", "description", "$schema", "$id", "examples", "default", "$defs").
Any other keyword, an anyOf whose alternatives could begin alike (two objects, integer and
number) and a recursive $ref are errors that name the feature and where it is (`SchemaError`),
so a schema is never silently half-obeyed. An object's keys may come in any
order, each at most once, only those in "properties"; `}` is allowed once every "required" key
is there.

A *state* is a stack of frames, one per value still open (the object, inside it an array, inside
that a string, ...). Each frame is immutable, so a state can be kept, shared and used as a
dictionary key. `feed(state, byte)` asks the innermost frame; when it cannot take the byte but
its value may end here (a number before ","), the frame is popped and its container takes the
byte.

Whitespace: at most one space wherever JSON allows whitespace (after "{", "[", ":" and ",", and
before "}", "]" and ","), and none before or after the whole value, so a model cannot spend its
tokens on blank space. Numbers: at most 16 digits before the point and 16 after (as llama.cpp's
JSON grammar), for the same reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

SPACE, QUOTE, BACKSLASH = ord(" "), ord('"'), ord("\\")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESCAPES = frozenset(b'"\\/bfnrt')

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "examples", "default",
                         "$defs", "definitions"})
KEYWORDS = {"object": {"properties", "required", "additionalProperties"},
            "array": {"items", "minItems", "maxItems"}, "string": {"maxLength"}}


class SchemaError(ValueError):
    """A schema this grammar does not support or that is not valid; `features` lists the
    unsupported keywords, each with where it is ("properties.tags.minItems")."""

    def __init__(self, message: str, features: list[str] | None = None):
        super().__init__(message)
        self.features = features or []


# --- the schema, compiled into nodes ------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # compared by identity: one node per place in the schema
class Node:
    """One place in the schema. kind: a name of TYPES, "enum", "anyOf" or "any" (any JSON value).

    properties  object: (key, Node) pairs; None: any keys, any values
    required    object: keys that must appear
    items       array: the Node of every item
    min_items   array: the fewest items (0)
    max_items   array: the most items (None: no limit)
    max_length  string: the most characters (None: no limit)
    options     enum: each allowed value as JSON text (bytes)
    alternatives  anyOf: (first bytes, Node) pairs; no byte begins two of them"""

    kind: str
    properties: tuple | None = None
    required: frozenset = frozenset()
    items: "Node | None" = None
    min_items: int = 0
    max_items: int | None = None
    max_length: int | None = None
    options: tuple = ()
    alternatives: tuple = ()

    def property(self, key: str) -> "Node":
        return dict(self.properties)[key]


ANY = Node("any")
ANY_OBJECT = Node("object")
ANY_ARRAY = Node("array", items=ANY)
NUMBER = Node("number")
BY_FIRST_BYTE = {ord("{"): ANY_OBJECT, ord("["): ANY_ARRAY, ord('"'): Node("string"),
                 ord("t"): Node("boolean"), ord("f"): Node("boolean"), ord("n"): Node("null")}
LITERALS = {"boolean": (b"true", b"false"), "null": (b"null",)}


class _Context:
    """What compiling one schema carries along: the root (for $ref), the references being
    compiled (a recursive one is refused), and the unsupported features found so far."""

    def __init__(self, root):
        self.root, self.open_refs, self.unsupported = root, set(), []


def compile_schema(schema) -> Node:
    """The Node tree of `schema` (a dict); None means any JSON object. Raises SchemaError naming
    every unsupported keyword, or what is wrong with the schema."""
    if schema is None:
        return ANY_OBJECT
    ctx = _Context(schema)
    node = _compile(schema, "", ctx)
    if ctx.unsupported:
        raise SchemaError("unsupported JSON Schema features: " + ", ".join(ctx.unsupported) +
                          f" (supported: type {', '.join(TYPES)}; properties, required, "
                          "additionalProperties, items, minItems, maxItems, maxLength, enum, "
                          "const, anyOf of alternatives that begin differently, local $ref)",
                          ctx.unsupported)
    return node


def _where(path: str) -> str:
    return f" at {path}" if path else " at the top level"


def _compile(schema, path: str, ctx: _Context) -> Node:
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema must be a JSON object{_where(path)}, got {schema!r}")
    if "$ref" in schema:
        return _ref(schema, path, ctx)
    if "anyOf" in schema:
        return _any_of(schema, path, ctx)
    kind = schema.get("type")
    if isinstance(kind, list):
        ctx.unsupported.append(f"'type' as a list{_where(path)}")
        kind = None
    elif kind is not None and kind not in TYPES:
        raise SchemaError(f"unknown type {kind!r}{_where(path)}; the types are "
                          f"{', '.join(TYPES)}")
    allowed = ANNOTATIONS | {"type", "enum", "const"} | KEYWORDS.get(kind, set())
    for key in schema:
        if key not in allowed:
            ctx.unsupported.append(f"{key!r}{_where(path)}")
    if "enum" in schema:
        return _enum(schema["enum"], kind, path)
    if "const" in schema:
        return _enum([schema["const"]], kind, path)
    if kind == "object":
        return _object(schema, path, ctx)
    if kind == "array":
        return _array(schema, path, ctx)
    if kind == "string" and "maxLength" in schema:
        return Node("string", max_length=_count(schema, "maxLength", path))
    return Node(kind) if kind is not None else ANY


def _ref(schema, path: str, ctx: _Context) -> Node:
    """A reference within the schema: "#/$defs/Name" (any JSON pointer into the root)."""
    ref = schema["$ref"]
    for key in schema:
        if key not in ANNOTATIONS | {"$ref"}:
            ctx.unsupported.append(f"{key!r} beside '$ref'{_where(path)}")
    if not isinstance(ref, str) or not ref.startswith("#"):
        ctx.unsupported.append(f"'$ref' to {ref!r}{_where(path)} (only references within the "
                               "schema, '#/...')")
        return ANY
    if ref in ctx.open_refs:
        ctx.unsupported.append(f"recursive '$ref' to {ref!r}{_where(path)}")
        return ANY
    target = ctx.root
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise SchemaError(f"'$ref' {ref!r}{_where(path)} points to nothing in the schema")
    ctx.open_refs.add(ref)
    try:
        return _compile(target, ref[2:].replace("/", "."), ctx)
    finally:
        ctx.open_refs.discard(ref)


NUMBER_START = frozenset(b"-0123456789")
FIRST_BYTES = {"object": frozenset(b"{"), "array": frozenset(b"["), "string": frozenset(b'"'),
               "number": NUMBER_START, "integer": NUMBER_START, "boolean": frozenset(b"tf"),
               "null": frozenset(b"n")}
ANY_FIRST = frozenset().union(*FIRST_BYTES.values())


def _first_bytes(node: Node) -> frozenset:
    """The bytes a value of `node` can begin with."""
    if node.kind == "enum":
        return frozenset(option[0] for option in node.options)
    if node.kind == "anyOf":
        return frozenset().union(*(first for first, _ in node.alternatives))
    return FIRST_BYTES.get(node.kind, ANY_FIRST)


def _any_of(schema, path: str, ctx: _Context) -> Node:
    """anyOf, decided by the value's first byte: the alternatives must begin differently."""
    options = schema["anyOf"]
    for key in schema:
        if key not in ANNOTATIONS | {"anyOf"}:
            ctx.unsupported.append(f"{key!r} beside 'anyOf'{_where(path)}")
    if not isinstance(options, list) or not options:
        raise SchemaError(f"'anyOf' must be a non-empty list of schemas{_where(path)}")
    nodes = []
    for i, option in enumerate(options):
        node = _compile(option, f"{path}.anyOf.{i}".lstrip("."), ctx)
        if node.kind == "anyOf":  # an anyOf inside an anyOf: its alternatives join these
            nodes.extend(n for _, n in node.alternatives)
        else:
            nodes.append(node)
    if len(nodes) == 1:
        return nodes[0]
    pairs = tuple((_first_bytes(n), n) for n in nodes)
    for i, (first, node) in enumerate(pairs):
        for other_first, other in pairs[i + 1:]:
            if first & other_first:
                ctx.unsupported.append(
                    f"'anyOf'{_where(path)} with alternatives that can begin alike ({node.kind} "
                    f"and {other.kind}; only alternatives of different kinds, such as "
                    "Optional[X])")
                return ANY
    return Node("anyOf", alternatives=pairs)


def _object(schema, path: str, ctx: _Context) -> Node:
    extra = schema.get("additionalProperties", False)
    if not isinstance(extra, bool):
        ctx.unsupported.append(f"'additionalProperties' as a schema{_where(path)}")
    if "properties" not in schema:
        if schema.get("required"):
            raise SchemaError(f"'required' without 'properties'{_where(path)}")
        return ANY_OBJECT
    properties = schema["properties"]
    if not isinstance(properties, dict):
        raise SchemaError(f"'properties' must be a JSON object{_where(path)}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        raise SchemaError(f"'required' must be a list of property names{_where(path)}")
    missing = [k for k in required if k not in properties]
    if missing:
        raise SchemaError(f"'required' names {missing} that are not in 'properties'"
                          f"{_where(path)}")
    pairs = tuple((key, _compile(value, f"{path}.properties.{key}".lstrip("."), ctx))
                  for key, value in properties.items())
    return Node("object", properties=pairs, required=frozenset(required))


def _array(schema, path: str, ctx: _Context) -> Node:
    items = schema.get("items")
    items = ANY if items is None else _compile(items, f"{path}.items".lstrip("."), ctx)
    low = _count(schema, "minItems", path) if "minItems" in schema else 0
    high = _count(schema, "maxItems", path) if schema.get("maxItems") is not None else None
    if high is not None and high < low:
        raise SchemaError(f"'maxItems' ({high}) is below 'minItems' ({low}){_where(path)}")
    return Node("array", items=items, min_items=low, max_items=high)


def _count(schema, name: str, path: str) -> int:
    value = schema[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SchemaError(f"'{name}' must be an integer >= 0{_where(path)}, got {value!r}")
    return value


def _enum(values, kind, path: str) -> Node:
    if not isinstance(values, list) or not values:
        raise SchemaError(f"'enum' must be a non-empty list{_where(path)}")
    options = []
    for value in values:
        if isinstance(value, (dict, list)) or (kind is not None and not _is_type(value, kind)):
            raise SchemaError(f"enum value {value!r}{_where(path)} is not of type "
                              f"{kind or 'string, number, boolean or null'}")
        options.append(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    return Node("enum", options=tuple(dict.fromkeys(options)))


PYTHON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
                "null": type(None)}


def _is_type(value, kind: str) -> bool:
    if kind not in PYTHON_TYPES or (isinstance(value, bool) and kind != "boolean"):
        return False
    return isinstance(value, PYTHON_TYPES[kind])


# --- the frames: one open value each ------------------------------------------------------------
#
# feed(byte) -> a tuple of frames that replaces this one (a container pushes a child after
#               itself), or None when the byte cannot come next in this value
# done       -> whether the value may end here
# child_done(child) -> this container, once its child value `child` has ended

@dataclass(frozen=True)
class Value:
    """A value of `node` is to come (after at most one space)."""

    node: Node
    spaced: bool = False
    done = False

    def feed(self, byte: int):
        if byte == SPACE and not self.spaced:
            return (Value(self.node, True),)
        node = self.node
        if node.kind == "anyOf":  # the first byte says which alternative this is
            node = next((n for first, n in node.alternatives if byte in first), None)
            if node is None:
                return None
        if node.kind == "any":  # the first byte says which kind of value this is
            node = BY_FIRST_BYTE.get(byte, NUMBER)
        kind = node.kind
        if kind == "object":
            return (Object(node),) if byte == ord("{") else None
        if kind == "array":
            return (Array(node),) if byte == ord("[") else None
        if kind == "string":
            return (String(left=node.max_length),) if byte == QUOTE else None
        if kind in ("number", "integer"):
            return Number(kind == "integer").feed(byte)
        return Literal(LITERALS.get(kind, node.options)).feed(byte)  # boolean, null, enum


@dataclass(frozen=True)
class Literal:
    """One of a few fixed texts: true, false, null, an enum value, or a property name."""

    options: tuple
    consumed: bytes = b""

    def feed(self, byte: int):
        text = self.consumed + bytes([byte])
        options = tuple(o for o in self.options if o.startswith(text))
        return (Literal(options, text),) if options else None

    @property
    def done(self) -> bool:
        return self.consumed in self.options


@dataclass(frozen=True)
class String:
    """Inside a string, after its opening quote. phase: "text", "escape" (after a backslash),
    "u1".."u4" (hex digits still due after \\u) or "closed". left: how many more characters
    it may hold (None: no limit); a character starts at each byte that is not a UTF-8
    continuation byte, and an escape such as \\n or \\u00e9 is one character."""

    phase: str = "text"
    left: int | None = None

    @property
    def done(self) -> bool:
        return self.phase == "closed"

    @property
    def in_text(self) -> bool:
        """Between characters of the text: a plain byte (not a quote, a backslash, a control
        byte) leaves this state as is, or with a limit spends one of the characters left."""
        return self.phase == "text"

    def feed(self, byte: int):
        phase, left = self.phase, self.left
        if phase == "text":
            if byte == QUOTE:
                return (String("closed"),)
            if byte < 0x20:  # control characters must be escaped
                return None
            if left is not None and not 0x80 <= byte < 0xC0:  # a new character begins
                if left == 0:
                    return None
                left -= 1
            if byte == BACKSLASH:
                return (String("escape", left),)
            return (self,) if left == self.left else (String("text", left),)
        if phase == "escape":
            if byte == ord("u"):
                return (String("u4", left),)
            return (String("text", left),) if byte in ESCAPES else None
        if phase.startswith("u") and byte in HEX:
            due = int(phase[1]) - 1
            return (String(f"u{due}" if due else "text", left),)
        return None


@dataclass(frozen=True)
class Number:
    """A JSON number, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; an integer stops before
    the fraction. phase: where in that pattern the text so far ends; digits: how many digits
    the current part (integer, fraction or exponent) has. As llama.cpp's JSON grammar does, a
    part has at most 16 digits (the exponent 3), so a model cannot write digits forever."""

    integer: bool
    phase: str = "start"
    digits: int = 0

    ENDS = frozenset({"zero", "int", "frac", "exp_digits"})
    NEXT = {  # phase -> [(bytes, next phase)]
        "start": [(b"-", "minus"), (b"0", "zero"), (b"123456789", "int")],
        "minus": [(b"0", "zero"), (b"123456789", "int")],
        "zero": [(b".", "dot"), (b"eE", "exp")],
        "int": [(b"0123456789", "int"), (b".", "dot"), (b"eE", "exp")],
        "dot": [(b"0123456789", "frac")],
        "frac": [(b"0123456789", "frac"), (b"eE", "exp")],
        "exp": [(b"+-", "exp_sign"), (b"0123456789", "exp_digits")],
        "exp_sign": [(b"0123456789", "exp_digits")],
        "exp_digits": [(b"0123456789", "exp_digits")],
    }
    MOST_DIGITS = {"int": 16, "frac": 16, "exp_digits": 3}

    @property
    def done(self) -> bool:
        return self.phase in self.ENDS

    def feed(self, byte: int):
        for allowed, phase in self.NEXT[self.phase]:
            if byte in allowed and not (self.integer and phase in ("dot", "exp")):
                digits = self.digits + 1 if phase == self.phase else 1
                if digits > self.MOST_DIGITS.get(phase, 1):
                    return None
                return (Number(self.integer, phase, digits),)
        return None


@dataclass(frozen=True)
class Object:
    """Inside an object. phase: "start" (after "{"), "key" (a key is open), "colon" (after the
    key), "value" (its value is open), "next" (after a value), "comma" (after ",") or "end"."""

    node: Node
    phase: str = "start"
    key: str | None = None
    seen: frozenset = frozenset()
    spaced: bool = False

    @property
    def done(self) -> bool:
        return self.phase == "end"

    def _with(self, **changes) -> "Object":
        fields = dict(node=self.node, phase=self.phase, key=self.key, seen=self.seen,
                      spaced=False)
        return Object(**{**fields, **changes})

    def _keys_left(self) -> list[str]:
        return [k for k, _ in self.node.properties if k not in self.seen]

    def feed(self, byte: int):
        phase = self.phase
        if byte == SPACE and phase in ("start", "colon", "next", "comma") and not self.spaced:
            return (self._with(spaced=True),)
        if byte == QUOTE and phase in ("start", "comma"):
            if self.node.properties is None:
                return (self._with(phase="key"), String())
            keys = self._keys_left()
            if not keys:
                return None
            options = tuple(json.dumps(k, ensure_ascii=False).encode("utf-8") for k in keys)
            return (self._with(phase="key"), Literal(options, b'"'))
        if byte == ord(":") and phase == "colon":
            node = ANY if self.node.properties is None else self.node.property(self.key)
            return (self._with(phase="value"), Value(node))
        if byte == ord(",") and phase == "next":
            more = self.node.properties is None or self._keys_left()
            return (self._with(phase="comma"),) if more else None
        if byte == ord("}") and phase in ("start", "next") and self.node.required <= self.seen:
            return (self._with(phase="end"),)
        return None

    def child_done(self, child) -> "Object":
        if self.phase == "key":
            key = json.loads(child.consumed) if isinstance(child, Literal) else None
            return self._with(phase="colon", key=key)
        seen = self.seen | {self.key} if self.key is not None else self.seen
        return self._with(phase="next", key=None, seen=seen)


@dataclass(frozen=True)
class Array:
    """Inside an array. phase: "start" (after "["), "item" (an item is open), "next" (after an
    item) or "end"; count: the items so far."""

    node: Node
    phase: str = "start"
    count: int = 0
    spaced: bool = False

    @property
    def done(self) -> bool:
        return self.phase == "end"

    def _room(self) -> bool:
        return self.node.max_items is None or self.count < self.node.max_items

    def feed(self, byte: int):
        phase, node = self.phase, self.node
        if byte == SPACE and phase in ("start", "next") and not self.spaced:
            return (Array(node, phase, self.count, True),)
        if byte == ord("]") and phase in ("start", "next") and self.count >= node.min_items:
            return (Array(node, "end", self.count),)
        if byte == ord(",") and phase == "next" and self._room():
            return (Array(node, "item", self.count), Value(node.items, spaced=False))
        if phase == "start" and self._room():  # the first item begins with this byte
            item = Value(node.items, spaced=True).feed(byte)
            return None if item is None else (Array(node, "item", self.count), *item)
        return None

    def child_done(self, child) -> "Array":
        return Array(self.node, "next", self.count + 1)


# --- the grammar: states are stacks of frames ---------------------------------------------------

class JSONGrammar:
    """JSON text that matches `schema` (None: any JSON object), one byte at a time."""

    def __init__(self, schema=None):
        self.schema = schema
        self.root = compile_schema(schema)
        self.start = (Value(self.root, spaced=True),)  # no space before the value

    def feed(self, state, data: bytes):
        """The state after the bytes `data`, or None when no valid text starts that way."""
        for byte in data:
            if state is None:
                return None
            state = self.feed_byte(state, byte)
        return state

    @staticmethod
    def feed_byte(state: tuple, byte: int):
        while state:
            top = state[-1]
            replaced = top.feed(byte)
            if replaced is not None:
                return state[:-1] + replaced
            if not top.done or len(state) == 1:
                return None  # the value cannot take the byte and cannot end; or it is all done
            # the innermost value has ended just before this byte: its container takes the byte
            state = state[:-2] + (state[-2].child_done(top),)
        return None

    @staticmethod
    def is_complete(state) -> bool:
        """Whether the text so far is a whole value (generation may stop here)."""
        return state is not None and len(state) == 1 and state[0].done

    @staticmethod
    def in_string_text(state) -> bool:
        """Whether `state` is inside a string's text (see String.in_text): every token of plain
        bytes may come next, if the string has room for its characters (string_room)."""
        return isinstance(state[-1], String) and state[-1].in_text

    @staticmethod
    def string_room(state) -> int | None:
        """How many more characters the string `state` is in may hold (None: no limit)."""
        return state[-1].left
