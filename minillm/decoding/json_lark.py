"""minillm's JSON grammar (json_grammar.py) written out as a Lark grammar, so that a maintained
grammar engine (llguidance, llguidance_constraint.py) accepts the same texts.

    root = compile_schema(schema)        # the same schema subset, the same SchemaError
    text = lark_grammar(root)            # "start: v0\\nv0: ..." in llguidance's Lark dialect

The translation follows the frames of json_grammar.py rule by rule:
- at most one space at each place inside a container where JSON allows whitespace (after "{",
  "[", ":" and ",", before "}", "]", ":" and ","), none around the whole value;
- numbers with at most 16 digits before and after the point and 3 in the exponent;
- strings: bytes, as json_grammar.py reads them: any byte from 0x20 up but a quote and a
  backslash, or an escape; with a maxLength, at most that many characters, a character beginning
  at each byte that is not a UTF-8 continuation byte (an escape counts as one);
- an object's keys in any order, each at most once, "}" once every required key is there. Lark
  has no "each at most once", so an object gets one rule per set of keys already written: 2^n
  rules for n properties. Objects with more than MAX_PROPERTIES properties are refused
  (SchemaError naming the object), where minillm's own grammar takes any number.

Two llguidance options make its masks minillm's: allow_invalid_utf8 (byte-level regexes: a
string may hold any byte, as in minillm, not only valid UTF-8) and no_forcing (where the grammar
allows one text only, such as the rest of a key, every token that spells it is allowed, not only
the canonical tokenization's).
"""

from __future__ import annotations

import json

from .json_grammar import Node, SchemaError

MAX_PROPERTIES = 10  # 2^10 = 1,024 rules for one object; each property more doubles the compile

# Byte-level regexes (llguidance's allow_invalid_utf8 mode), as json_grammar.py reads bytes:
# \x22 is '"', \x5C '\\', \x2F '/'. A character begins at any byte that is not a UTF-8
# continuation byte (CONT); an escape is one character.
CONT = r"[\x80-\xBF]"
ESCAPE = r"\x5C(?:[\x22\x5C\x2Fbfnrt]|u[0-9a-fA-F]{4})"
PLAIN = r"[\x20\x21\x23-\x5B\x5D-\xFF]"
START = r"[\x20\x21\x23-\x5B\x5D-\x7F\xC0-\xFF]"
OPTIONS = '%llguidance {"no_forcing": true, "allow_invalid_utf8": true}'
TERMINALS = {
    "STRING": rf"/\x22(?:{PLAIN}|{ESCAPE})*\x22/",
    "NUMBER": r"/-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,3})?/",
    "INTEGER": r"/-?(?:0|[1-9][0-9]{0,15})/",
    "SP": '" "',
}
ANY_RULES = {  # any JSON value, as JSONGrammar's "any" node reads it
    "any_value": 'any_object | any_array | STRING | NUMBER | "true" | "false" | "null"',
    "any_object": '"{" SP? "}" | "{" SP? any_member (SP? "," SP? any_member)* SP? "}"',
    "any_member": 'STRING SP? ":" SP? any_value',
    "any_array": '"[" SP? "]" | "[" SP? any_value (SP? "," SP? any_value)* SP? "]"',
}


def literal(text: bytes) -> str:
    """A Lark regex terminal that matches exactly the bytes `text`, every byte escaped but ASCII
    letters and digits, so no quote or slash needs care."""
    return "/" + "".join(chr(b) if chr(b).isascii() and chr(b).isalnum() else f"\\x{b:02X}"
                         for b in text) + "/"


class _Writer:
    def __init__(self):
        self.rules: dict[str, str] = {}
        self.terminals: dict[str, str] = dict(TERMINALS)
        self.names: dict[int, str] = {}  # id(node) -> its rule
        self.uses_any = False
        self.count = 0

    def fresh(self) -> str:
        self.count += 1
        return f"r{self.count}"

    def terminal(self, body: str) -> str:
        for name, known in self.terminals.items():
            if known == body:
                return name
        name = f"T{len(self.terminals)}"
        self.terminals[name] = body
        return name

    def rule(self, body: str) -> str:
        name = self.fresh()
        self.rules[name] = body
        return name

    def value(self, node: Node, where: str = "") -> str:
        """The name of the rule (or terminal) for a value of `node`."""
        name = self.names.get(id(node))
        if name is None:
            name = self.names[id(node)] = self._value(node, where)
        return name

    def _value(self, node: Node, where: str) -> str:
        kind = node.kind
        if kind == "any":
            self.uses_any = True
            return "any_value"
        if kind == "object":
            if node.properties is None:
                self.uses_any = True
                return "any_object"
            return self._object(node, where)
        if kind == "array":
            return self._array(node, where)
        if kind == "string":
            if node.max_length is None:
                return "STRING"
            units = f"(?:(?:{START}|{ESCAPE}){CONT}*){{0,{node.max_length}}}"
            return self.terminal(rf"/\x22{CONT}*{units}\x22/")
        if kind == "number":
            return "NUMBER"
        if kind == "integer":
            return "INTEGER"
        if kind == "boolean":
            return self.rule('"true" | "false"')
        if kind == "null":
            return self.rule('"null"')
        if kind == "enum":
            return self.rule(" | ".join(self.terminal(literal(o)) for o in node.options))
        if kind == "anyOf":
            return self.rule(" | ".join(self.value(n, where) for _, n in node.alternatives))
        raise AssertionError(f"a node of kind {kind!r}")

    def _array(self, node: Node, where: str) -> str:
        item = self.value(node.items, f"{where}.items".lstrip("."))
        low, high = node.min_items, node.max_items
        choices = ['"[" SP? "]"'] if low == 0 else []
        if high is None or high > 0:
            more_low = max(low - 1, 0)
            more = f"{{{more_low},}}" if high is None else f"{{{more_low},{high - 1}}}"
            choices.append(f'"[" SP? {item} (SP? "," SP? {item}){more} SP? "]"')
        return self.rule(" | ".join(choices))

    def _object(self, node: Node, where: str) -> str:
        keys = [key for key, _ in node.properties]
        if len(keys) > MAX_PROPERTIES:
            raise SchemaError(
                f"the llguidance grammar backend takes objects of at most {MAX_PROPERTIES} "
                f"properties (keys in any order need a rule per set of keys written); the "
                f"object at {where or 'the top level'} has {len(keys)}: use the minillm "
                "backend for it", [f"an object of {len(keys)} properties at "
                                   f"{where or 'the top level'}"])
        members = []
        for key, child in node.properties:
            name = self.terminal(literal(json.dumps(key, ensure_ascii=False).encode("utf-8")))
            value = self.value(child, f"{where}.properties.{key}".lstrip("."))
            members.append(self.rule(f'{name} SP? ":" SP? {value}'))
        required = {i for i, key in enumerate(keys) if key in node.required}
        first, after = self.fresh(), self.fresh() + "_"  # after "{", and after each key set
        full = (1 << len(keys)) - 1
        bodies = {}
        for seen in range(1, full + 1):
            choices = []
            if all(seen >> i & 1 for i in required):
                choices.append('"}"')
            for i, member in enumerate(members):
                if not seen >> i & 1:
                    choices.append(f'"," SP? {member} SP? {after}{seen | 1 << i}')
            bodies[f"{after}{seen}"] = " | ".join(choices)
        opening = ['"}"'] if not required else []
        opening += [f"{m} SP? {after}{1 << i}" for i, m in enumerate(members)]
        self.rules[first] = '"{" SP? (' + " | ".join(opening) + ")"
        self.rules.update(bodies)
        return first


def lark_grammar(root: Node) -> str:
    """The Lark grammar (llguidance's dialect) of the JSON texts `root` accepts (see the module
    docstring for the one difference). Raises SchemaError for an object over MAX_PROPERTIES."""
    writer = _Writer()
    top = writer.value(root)
    lines = [OPTIONS, f"start: {top}"]
    lines += [f"{name}: {body}" for name, body in writer.rules.items()]
    if writer.uses_any:
        lines += [f"{name}: {body}" for name, body in ANY_RULES.items()]
    lines += [f"{name}: {body}" for name, body in writer.terminals.items()]
    return "\n".join(lines) + "\n"


__all__ = ["lark_grammar", "MAX_PROPERTIES"]
