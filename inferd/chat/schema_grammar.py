"""JSON Schema -> GBNF, so sampling can only produce JSON that validates.

Written for inferd rather than wrapping llama-cpp-python's `json_schema_to_gbnf`, because
that converter lets raw control characters and lone surrogate escapes into strings (output
`json.loads` rejects, or that cannot be encoded as UTF-8), asserts instead of reporting
what is wrong, and silently ignores constraints such as `minimum`, so its output may not
validate.

The rule here: every keyword that constrains a value is either enforced by the grammar or
refused with `InvalidInput` naming the keyword and where it is. Where enforcing exactly is
impossible in a context-free grammar, the grammar generates a valid *subset* (e.g. numbers
with bounds use integer parts that keep every value in range). Annotations (title,
description, default, examples, ...) and unknown keywords are ignored, as JSON Schema says.

Supported: type (incl. lists), const, enum, properties/required/additionalProperties,
items/prefixItems/minItems/maxItems, minLength/maxLength, pattern (a regular-expression
subset, see `regex_gbnf`), formats date, time, date-time, uuid, email, ipv4, hostname,
uri (others are annotations), minimum/maximum/exclusive*, anyOf/oneOf, allOf (merged),
local $ref to $defs/definitions/any pointer, recursion.
"""

from __future__ import annotations

import json
import math
import re
from urllib.parse import unquote

from inferd.chat.gbnf import JSON_PLAIN, char_class, check_gbnf, literal, prune
from inferd.chat.regex_gbnf import pattern_to_gbnf
from inferd.errors import InvalidInput

# Values carry no trailing whitespace; containers put `ws` around their members. One
# optional space only: unbounded whitespace lets a model "run away" emitting blanks.
PRIMITIVES = {
    "ws": '" "?',
    "jchar": char_class(JSON_PLAIN) + r' | "\\" (["\\/bfnrt] | "u" jhex4)',
    # \u escapes of UTF-16 surrogates are excluded: a lone one cannot be encoded as UTF-8.
    "jhex4": "[0-9a-cA-C] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [eEfF] [0-9a-fA-F]{3}",
    "jstring": r'"\"" jchar* "\""',
    # Digits are capped so a model cannot emit an endless number; 1e99 stays a finite float.
    "jint": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "jnumber": 'jint ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?',
    "jbool": '"true" | "false"',
    "jnull": '"null"',
    "jvalue": "jobject | jarray | jstring | jnumber | jbool | jnull",
    "jobject": '"{" ws ( jstring ws ":" ws jvalue ws ( "," ws jstring ws ":" ws jvalue ws )* )? "}"',
    "jarray": '"[" ws ( jvalue ws ( "," ws jvalue ws )* )? "]"',
}

_FORMATS = {
    "year": '[0-9] [0-9] [0-9] [1-9] | [0-9] [0-9] [1-9] "0" | [0-9] [1-9] "00" | [1-9] "000"',
    # A leap year: divisible by 4, centuries only when divisible by 400 (and never 0000).
    "leapyear": '[0-9] [0-9] ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [48] | [2468] [048] | [13579] [26]) "00"',
    "date": ('fmt-year "-" ( ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])'
             ' | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30")'
             ' | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]) ) | fmt-leapyear "-02-29"'),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})?'
             ' ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])'),
    "date-time": 'fmt-date "T" fmt-time',
    "uuid": " \"-\" ".join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12)),
    "label": "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?",
    "hostname": 'fmt-label ("." fmt-label){0,8}',
    "email": '[a-zA-Z0-9_%+-]{1,32} ("." [a-zA-Z0-9_%+-]{1,32}){0,3} "@" fmt-label ("." fmt-label){1,4}',
    "octet": '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]',
    "ipv4": 'fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet',
    "uri": "[a-z] [a-z0-9+.-]{0,15} \"://\" fmt-label (\".\" fmt-label){0,8} (\"/\" [a-zA-Z0-9._~%!$&'()*+,;=:@-]{0,64}){0,8}",
}
RESERVED = {"root", *PRIMITIVES, *("fmt-" + k for k in _FORMATS)}
STRING_FORMATS = ("date", "time", "date-time", "uuid", "hostname", "email", "ipv4", "uri")

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly", "$anchor", "contentMediaType", "contentEncoding", "nullable",
               "discriminator", "strict", "format", "$defs", "definitions"}
UNSUPPORTED = {
    "not": "'not' cannot be enforced by a grammar",
    "if": "'if'/'then'/'else' are not supported", "then": "'if'/'then'/'else' are not supported",
    "else": "'if'/'then'/'else' are not supported",
    "dependentRequired": "'dependentRequired' is not supported", "dependentSchemas": "'dependentSchemas' is not supported",
    "dependencies": "'dependencies' is not supported", "propertyNames": "'propertyNames' is not supported",
    "patternProperties": "'patternProperties' is not supported", "unevaluatedProperties": "'unevaluatedProperties' is not supported",
    "unevaluatedItems": "'unevaluatedItems' is not supported", "contains": "'contains' is not supported",
    "minContains": "'minContains' is not supported", "maxContains": "'maxContains' is not supported",
    "multipleOf": "'multipleOf' is not supported", "minProperties": "'minProperties' is not supported",
    "maxProperties": "'maxProperties' is not supported", "$dynamicRef": "'$dynamicRef' is not supported",
    "$recursiveRef": "'$recursiveRef' is not supported",
}
_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
_INT_CAP = 10 ** 16 - 1  # the largest integer the unbounded rules can write (16 digits)


def _is_type(value, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, float) and value.is_integer())
    return {"string": lambda v: isinstance(v, str), "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool), "null": lambda v: v is None,
            "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list)}[t](value)


def _json_literal(value) -> str:
    return literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _uint_range(lo: int, hi: int) -> str:
    """GBNF for decimal strings (no leading zeros) of the integers in [lo, hi], 0 <= lo <= hi."""
    alts = []
    for n in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (n - 1) if n > 1 else 0), min(hi, 10 ** n - 1)
        if a <= b:
            alts.append(_same_len(str(a), str(b)))
    return " | ".join(alts)


def _same_len(x: str, y: str) -> str:
    """Digit strings of equal length between x and y inclusive (inner positions may be 0)."""
    if x == y:
        return f'"{x}"'
    i = next(k for k in range(len(x)) if x[k] != y[k])
    head = f'"{x[:i]}" ' if i else ""
    x, y = x[i:], y[i:]
    if len(x) == 1:
        return f"{head}[{x}-{y}]"
    rest, parts = len(x) - 1, []
    lo_full, hi_full = x[1:] == "0" * rest, y[1:] == "9" * rest
    first = int(x[0]) + (0 if lo_full else 1)
    last = int(y[0]) - (0 if hi_full else 1)
    if not lo_full:
        parts.append(f'"{x[0]}" ({_same_len(x[1:], "9" * rest)})')
    if first <= last:
        parts.append(f"[{first}-{last}] [0-9]{{{rest}}}")
    if not hi_full:
        parts.append(f'"{y[0]}" ({_same_len("0" * rest, y[1:])})')
    body = " | ".join(parts)
    return f"{head}({body})" if head else body


def int_range(lo: int | None, hi: int | None) -> str:
    """GBNF for integers in [lo, hi] (None = unbounded, capped at 16 digits); '' if empty."""
    lo = None if lo is not None and lo < -_INT_CAP else lo
    hi = None if hi is not None and hi > _INT_CAP else hi
    alts = []
    nn_lo, nn_hi = max(lo, 0) if lo is not None else 0, hi if hi is not None else _INT_CAP
    if nn_lo <= nn_hi:
        alts.append(_uint_range(nn_lo, nn_hi))
    neg_lo, neg_hi = max(-hi, 1) if hi is not None else 1, -lo if lo is not None else _INT_CAP
    if neg_lo <= neg_hi:
        alts.append(f'"-" ({_uint_range(neg_lo, neg_hi)})')
    return " | ".join(f"({a})" for a in alts) if len(alts) > 1 else (alts[0] if alts else "")


MAX_SCHEMA_NODES = 4096   # values in one schema (subschemas, names, enum members ...)
MAX_SCHEMA_DEPTH = 64


class SchemaGrammar:
    """Accumulates rules for one grammar; `visit` returns a GBNF expression for a schema.

    Several schemas may share one builder (e.g. the parameters of every offered tool), so
    the primitives are emitted once. `param` names the request field for error messages.
    """

    def __init__(self, param: str = "response_format"):
        self.param = param
        self.rules: dict[str, str] = {}
        self._by_body: dict[str, str] = {}
        self._refs: dict[tuple[int, str], str] = {}

    # -- rules
    def fail(self, where: str, msg: str):
        raise InvalidInput(f"invalid JSON schema at {where or '/'}: {msg}", param=self.param)

    def prim(self, name: str) -> str:
        return name  # primitives are always available; `text` keeps the reachable ones

    def rule(self, hint: str, body: str) -> str:
        if body in self._by_body:
            return self._by_body[body]
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-").lower()[:40] or "r"
        name, i = base, 1
        while name in self.rules or name in RESERVED:
            name, i = f"{base}-{i}", i + 1
        self.rules[name] = body
        self._by_body[body] = name
        return name

    def text(self, root_expr: str, extra: dict[str, str] | None = None) -> str:
        """The finished grammar: `root ::= root_expr` plus every rule reachable from it."""
        rules = {"root": root_expr, **(extra or {}), **self.rules, **PRIMITIVES,
                 **{"fmt-" + k: v for k, v in _FORMATS.items()}}
        rules = prune(rules)
        text = "".join(f"{k} ::= {v}\n" for k, v in rules.items())
        try:
            check_gbnf(text, param=self.param)
        except InvalidInput as e:  # our own output: only an unsatisfiable (e.g. endless) schema gets here
            if "longer than" in e.message or "more than" in e.message:
                raise InvalidInput(f"JSON schema is too large to constrain output ({e.message})",
                                   param=self.param) from None
            raise InvalidInput(f"JSON schema cannot be satisfied by any finite value ({e.message})",
                               param=self.param) from None
        return text

    def _check_size(self, schema, where: str) -> None:
        """Refuse schemas past MAX_SCHEMA_NODES values (counted without recursion) and past
        MAX_SCHEMA_DEPTH levels before building anything: 10^4 properties once took ~1 GB."""
        todo, seen = [(schema, 0)], 0
        while todo:
            node, depth = todo.pop()
            seen += 1
            if seen > MAX_SCHEMA_NODES:
                self.fail(where, f"the schema is too large (more than {MAX_SCHEMA_NODES} values)")
            if depth > MAX_SCHEMA_DEPTH:
                self.fail(where, f"the schema is nested more than {MAX_SCHEMA_DEPTH} levels deep")
            if isinstance(node, dict):
                todo.extend((v, depth + 1) for v in node.values())
            elif isinstance(node, list):
                todo.extend((v, depth + 1) for v in node)

    # -- schemas
    def visit(self, schema, where: str, root_doc=None) -> str:
        if root_doc is None:
            self._check_size(schema, where)
        doc = root_doc if root_doc is not None else schema
        if schema is True or schema == {}:
            return self.prim("jvalue")
        if schema is False:
            self.fail(where, "the schema 'false' matches nothing")
        if not isinstance(schema, dict):
            self.fail(where, f"a schema must be an object or a boolean, not {type(schema).__name__}")
        for key in schema:
            if key in UNSUPPORTED:
                self.fail(where, UNSUPPORTED[key] + " (it cannot be enforced during sampling)")
        if "$ref" in schema:
            return self._ref(schema, where, doc)
        if "allOf" in schema:
            return self.visit(self._merge_all_of(schema, where, doc), where, doc)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                subs = schema[key]
                if not isinstance(subs, list) or not subs:
                    self.fail(where, f"'{key}' must be a non-empty array")
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                alts = [self.visit(self._merge([rest, s], f"{where}/{key}/{i}", doc) if _constraints(rest) else s,
                                   f"{where}/{key}/{i}", doc) for i, s in enumerate(subs)]
                return self.rule(where.split("/")[-1] or "alt", " | ".join(alts))
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                self.fail(where, "'type' is an empty list")
            return self.rule(where.split("/")[-1] or "types",
                             " | ".join(self.visit({**schema, "type": t}, where, doc) for t in types))
        if types is not None and types not in _TYPES:
            self.fail(where, f"unknown type {types!r}")
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                self.fail(where, "'enum' must be a non-empty array")
            if types:
                values = [v for v in values if _is_type(v, types)]
                if not values:
                    self.fail(where, f"no 'enum' value is of type {types!r}")
            return self.rule(where.split("/")[-1] or "enum", " | ".join(_json_literal(v) for v in values))
        if types is None:
            types = _infer_type(schema)
            if types is None:
                return self.prim("jvalue")
        return getattr(self, "_" + types)(schema, where, doc)

    def _ref(self, schema: dict, where: str, doc) -> str:
        ref = schema["$ref"]
        if not isinstance(ref, str):
            self.fail(where, f"'$ref' must be a string, not {type(ref).__name__}")
        extra = [k for k in schema if k != "$ref" and k not in ANNOTATIONS]
        if extra:
            self.fail(where, f"'$ref' next to {extra} is not supported; wrap them in 'allOf'")
        key = (id(doc), ref)
        if key in self._refs:
            return self._refs[key]
        target = self._resolve(ref, where, doc)
        name = self.rule("ref-" + ref.split("/")[-1], f"<pending {ref} {len(self._refs)}>")
        self._refs[key] = name  # registered before visiting so recursive schemas close the loop
        body = self.visit(target, ref[1:] or "/", doc)
        del self._by_body[self.rules[name]]
        self.rules[name] = body
        return name

    def _resolve(self, ref, where: str, doc):
        if not isinstance(ref, str) or not ref.startswith("#"):
            self.fail(where, f"only local references ('#/...') are supported, not {ref!r}")
        node = doc
        for part in [p for p in unquote(ref[1:]).split("/")][1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                self.fail(where, f"'$ref' {ref!r} points at nothing")
        return node

    def _merge_all_of(self, schema: dict, where: str, doc) -> dict:
        subs = schema["allOf"]
        if not isinstance(subs, list) or not subs:
            self.fail(where, "'allOf' must be a non-empty array")
        parts = [{k: v for k, v in schema.items() if k != "allOf"}]
        for i, s in enumerate(subs):
            while isinstance(s, dict) and "$ref" in s:
                s = self._resolve(s["$ref"], f"{where}/allOf/{i}", doc)
            parts.append(s)
        return self._merge(parts, f"{where}/allOf", doc)

    def _merge(self, parts: list, where: str, doc) -> dict:
        """Intersect simple schemas: union properties/required, equal values elsewhere.

        `additionalProperties` keeps its meaning per part: it judges the properties that
        *that* part does not declare, so `false` in one part removes the others' extras.
        """
        out: dict = {}
        extras: list[tuple[set, object]] = []  # (names a part declares, its additionalProperties)
        for p in parts:
            while isinstance(p, dict) and "$ref" in p:
                target = self._resolve(p["$ref"], where, doc)
                p = {**target, **{k: v for k, v in p.items() if k != "$ref"}} if isinstance(target, dict) else target
            if p is True:
                continue
            if not isinstance(p, dict) or "anyOf" in p and "anyOf" in out:
                self.fail(where, "this combination of schemas is not supported")
            if "allOf" in p:
                p = self._merge_all_of(p, where, doc)
            if not isinstance(p.get("properties", {}), dict) or not isinstance(p.get("required", []), list) \
                    or not all(isinstance(r, str) for r in p.get("required", [])):
                self.fail(where, "'properties' must be an object and 'required' an array of names")
            if "additionalProperties" in p and p["additionalProperties"] is not True:
                extras.append((set(p.get("properties", {})), p["additionalProperties"]))
            for k, v in p.items():
                if k in ANNOTATIONS or k == "additionalProperties":
                    continue
                if k == "properties":
                    props = dict(out.get("properties", {}))
                    for name, sub in v.items():
                        props[name] = self._merge([props[name], sub], f"{where}/properties/{name}", doc) if name in props else sub
                    out["properties"] = props
                elif k == "required":
                    out["required"] = list(dict.fromkeys([*out.get("required", []), *v]))
                elif k in out and out[k] != v:
                    self.fail(where, f"conflicting values for '{k}' cannot be merged")
                else:
                    out[k] = v
        for names, extra in extras:
            for prop in list(out.get("properties", {})):
                if prop in names:
                    continue
                if extra is False:
                    if prop in out.get("required", []):
                        self.fail(where, f"required property {prop!r} is forbidden by additionalProperties: false")
                    del out["properties"][prop]
                else:
                    out["properties"][prop] = self._merge([out["properties"][prop], extra], where, doc)
        if extras:
            schemas = [e for _, e in extras]
            out["additionalProperties"] = False if False in schemas else (
                schemas[0] if len(schemas) == 1 else self._merge(schemas, where, doc))
        return out

    # -- one method per type
    def _string(self, s: dict, where: str, doc) -> str:
        fmt, pattern = s.get("format"), s.get("pattern")
        lengths = "minLength" in s or "maxLength" in s
        if fmt in STRING_FORMATS:
            if pattern is not None or lengths:
                self.fail(where, f"format {fmt!r} cannot be combined with 'pattern' or length limits")
            return self.rule("str-" + fmt, r'"\"" ' + self.prim("fmt-" + fmt) + r' "\""')
        if pattern is not None:
            if lengths:
                self.fail(where, "'pattern' cannot be combined with 'minLength'/'maxLength'")
            if not isinstance(pattern, str):
                self.fail(where, "'pattern' must be a string")
            try:
                body = pattern_to_gbnf(pattern, self.prim("jchar"))
            except ValueError as e:
                self.fail(where, f"pattern {pattern!r}: {e}")
            return self.rule(where.split("/")[-1] + "-pattern", r'"\"" (' + body + r') "\""')
        if lengths:
            lo, hi = s.get("minLength", 0), s.get("maxLength")
            if not isinstance(lo, int) or lo < 0 or (hi is not None and (not isinstance(hi, int) or hi < lo)):
                self.fail(where, "'minLength'/'maxLength' must be integers with 0 <= minLength <= maxLength")
            if max(lo, hi or 0) > 2000:
                self.fail(where, "string length limits above 2000 are not supported")
            rep = f"{{{lo},{'' if hi is None else hi}}}"
            return self.rule(where.split("/")[-1] + "-str", r'"\"" ' + self.prim("jchar") + rep + r' "\""')
        return self.prim("jstring")

    def _bounds(self, s: dict, where: str):
        def num(key):
            v = s.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                self.fail(where, f"'{key}' must be a finite number")
            return v
        lo, hi = num("minimum"), num("maximum")
        lo_x, hi_x = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
        lo_excl = hi_excl = False
        if isinstance(lo_x, bool):  # draft 4: a flag on minimum
            lo_excl = lo_x
        elif lo_x is not None:
            lo_x = num("exclusiveMinimum")
            if lo is None or lo_x >= lo:
                lo, lo_excl = lo_x, True
        if isinstance(hi_x, bool):
            hi_excl = hi_x
        elif hi_x is not None:
            hi_x = num("exclusiveMaximum")
            if hi is None or hi_x <= hi:
                hi, hi_excl = hi_x, True
        # The smallest/largest integers that satisfy each bound.
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
        return lo, hi, hi_excl, ilo, ihi

    def _integer(self, s: dict, where: str, doc) -> str:
        lo, hi, _, ilo, ihi = self._bounds(s, where)
        if lo is None and hi is None:
            return self.prim("jint")
        body = int_range(ilo, ihi)
        if not body:
            self.fail(where, "no integer satisfies 'minimum'/'maximum'")
        return self.rule(where.split("/")[-1] + "-int", body)

    def _number(self, s: dict, where: str, doc) -> str:
        lo, hi, hi_excl, ilo, ihi = self._bounds(s, where)
        if lo is None and hi is None:
            return self.prim("jnumber")
        # A subset that provably stays in range: whole numbers in [ilo, ihi]; I.fff with
        # I >= 0 lies in [I, I+1); -I.fff lies in (-(I+1), -I].
        alts, frac = [], '"." [0-9]{1,15}'
        whole = int_range(ilo, ihi)
        if whole:
            alts.append(whole)
        pos = int_range(max(ilo, 0) if ilo is not None else 0, math.floor(hi) - 1 if hi is not None else None)
        if pos:
            alts.append(f"({pos}) {frac}")
        neg_hi = math.floor(-lo) - 1 if lo is not None else None
        neg_lo = 0 if hi is None else max(0, (math.floor(-hi) + 1) if hi_excl else math.ceil(-hi))
        neg = int_range(neg_lo, neg_hi) if neg_hi is None or neg_lo <= neg_hi else ""
        if neg:
            alts.append(f'"-" ({neg}) {frac}')
        if not alts:
            self.fail(where, "the range between 'minimum' and 'maximum' is too narrow to enforce by a grammar")
        return self.rule(where.split("/")[-1] + "-num", " | ".join(f"({a})" for a in alts))

    def _boolean(self, s, where, doc) -> str:
        return self.prim("jbool")

    def _null(self, s, where, doc) -> str:
        return self.prim("jnull")

    def _object(self, s: dict, where: str, doc) -> str:
        props = s.get("properties", {})
        required = s.get("required", [])
        extra = s.get("additionalProperties")
        if not isinstance(props, dict) or not isinstance(required, list) \
                or not all(isinstance(r, str) for r in required):
            self.fail(where, "'properties' must be an object and 'required' an array of names")
        if not props and not required and extra in (None, True, {}):
            return self.prim("jobject")  # a free-form object
        props = dict(props)
        for r in required:
            if r not in props:
                if extra is False:
                    self.fail(where, f"required property {r!r} is forbidden by additionalProperties: false")
                props[r] = {} if extra in (None, True) else extra
        ws = self.prim("ws")
        slots = []  # (kv expression, required?) in declared order, then the extra-keys slot
        for name, sub in props.items():
            value = self.visit(sub, f"{where}/properties/{name}", doc)
            kv = self.rule(f"{where.split('/')[-1]}-{name}-kv", f"{_json_literal(name)} {ws} \":\" {ws} {value}")
            slots.append((kv, name in required))
        star = None
        if extra is True or isinstance(extra, dict):
            value = self.visit(extra, f"{where}/additionalProperties", doc)
            star = self.rule(f"{where.split('/')[-1]}-extra-kv", f"{self.prim('jstring')} {ws} \":\" {ws} {value}")
        sep = f'"," {ws}'
        # rest[i]: members from slot i on, each preceded by a comma (something came before).
        # Each is its own rule naming the next, so the grammar grows linearly with the slots.
        base = where.split("/")[-1] or "object"
        rest = [self.rule(f"{base}-rest", f"( {sep} {star} {ws} )*") if star else ""]
        for i, (kv, req) in enumerate(reversed(slots)):
            item = f"{sep} {kv} {ws}"
            body = f"{item} {rest[0]}" if req else f"( {item} )? {rest[0]}"
            rest.insert(0, self.rule(f"{base}-rest{len(slots) - i}", body))
        # first[i]: members from slot i on, none emitted yet (no leading comma).
        first = f"( {star} {ws} ( {sep} {star} {ws} )* )?" if star else ""
        for i in range(len(slots) - 1, -1, -1):
            kv, req = slots[i]
            take = f"{kv} {ws} {rest[i + 1]}".strip()
            if req:
                first = take
            elif first:
                first = f"{take} | {self.rule(where.split('/')[-1] + '-members', first)}"
            else:
                first = f"( {take} )?"
        return self.rule(where.split("/")[-1] or "object", f'"{{" {ws} ( {first} ) "}}"')

    def _array(self, s: dict, where: str, doc) -> str:
        items, prefix = s.get("items"), s.get("prefixItems", [])
        if isinstance(items, list):  # draft 4 tuple form
            prefix, items = items, s.get("additionalItems", True)
        if not isinstance(prefix, list):
            self.fail(where, "'prefixItems' must be an array of schemas")
        lo, hi = s.get("minItems", 0), s.get("maxItems")
        if not isinstance(lo, int) or lo < 0 or (hi is not None and (not isinstance(hi, int) or hi < lo)):
            self.fail(where, "'minItems'/'maxItems' must be integers with 0 <= minItems <= maxItems")
        if s.get("uniqueItems") and (hi is None or hi > 1):
            self.fail(where, "'uniqueItems' cannot be enforced by a grammar")
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
            if lo > hi:
                self.fail(where, "'minItems' exceeds the number of allowed items")
        if lo > 2000:
            self.fail(where, "'minItems' above 2000 is not supported")
        if hi is not None and hi > 2000:
            hi = None
        ws, sep = self.prim("ws"), f'"," {self.prim("ws")}'
        if hi is not None:
            prefix = prefix[:hi]
        elems = [self.visit(p, f"{where}/prefixItems/{i}", doc) for i, p in enumerate(prefix)]
        tail = self.visit(True if items is None else items, f"{where}/items", doc) if items is not False else None
        # Build from the end: seq(k) = elements k.. with k counted; each after the first gets a comma.
        k0 = len(elems)
        if tail is None:
            seq = ""
        else:
            a, b = max(lo - k0, 0), None if hi is None else hi - k0
            if b is not None and b <= 0:
                seq = ""
            elif k0 == 0:
                more = f"( {sep} {tail} {ws} ){{{max(a - 1, 0)},{'' if b is None else b - 1}}}"
                seq = f"{tail} {ws} {more}" if a >= 1 else f"( {tail} {ws} {more} )?"
            else:
                seq = f"( {sep} {tail} {ws} ){{{a},{'' if b is None else b}}}"
        for k in range(k0 - 1, -1, -1):
            lead = "" if k == 0 else f"{sep} "
            take = f"{lead}{elems[k]} {ws} {seq}".strip()
            seq = take if k < lo else f"( {take} )?"
            seq = self.rule(f"{where.split('/')[-1]}-items-{k}", seq)
        return self.rule(where.split("/")[-1] or "array", f'"[" {ws} {seq} "]"')


def _constraints(schema: dict) -> bool:
    return any(k not in ANNOTATIONS for k in schema)


def _infer_type(s: dict) -> str | None:
    if any(k in s for k in ("properties", "required", "additionalProperties")):
        return "object"
    if any(k in s for k in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    if any(k in s for k in ("pattern", "minLength", "maxLength")) or s.get("format") in STRING_FORMATS:
        return "string"
    if any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return "number"
    return None
