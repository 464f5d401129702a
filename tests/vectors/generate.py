#!/usr/bin/env python3
"""Generates tests/vectors/fingerprint.json: canonical texts and SHA-256 fingerprints.

This is an independent implementation of docs/fingerprint.md in Python, standard library only. It does
not run or import idem, and it shares no code with it: JSON is parsed by Python's `json` module (with
hooks that keep numbers as text and reject what RFC 8259 forbids), numbers are canonicalized with
`decimal`, base64 with `base64`, timestamps with `datetime`, hashes with `hashlib`. `tests/it/vectors.rs`
then checks both Rust entry points against every case.

Usage:  python3 tests/vectors/generate.py          (rewrites fingerprint.json next to this script)
        python3 tests/vectors/generate.py --check  (fails if the file is not up to date)
"""

import base64
import calendar
import datetime
import decimal
import hashlib
import json
import re
import sys
from pathlib import Path

MAX_DEPTH = 64
MAX_ZEROS = 1100


class Invalid(Exception):
    """A body with no canonical form; `kind` is the error kind of docs/fingerprint.md."""

    def __init__(self, kind, detail=""):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


# ---------------------------------------------------------------------------------------------
# Parsing: Python's json module, made strict, numbers kept as text.


class Num:
    """A JSON number, as its source text."""

    def __init__(self, text):
        self.text = text


class Obj:
    """A JSON object, as its list of (name, value) pairs in source order."""

    def __init__(self, pairs):
        self.pairs = pairs


def _pairs(pairs):
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise Invalid("duplicate_member", names)
    return Obj(pairs)


def _constant(name):
    raise Invalid("invalid_json", f"{name} is not JSON")


def _check_strings(value):
    """Python's json accepts lone surrogates (`"\\ud800"`); RFC 8259 text cannot hold them."""

    def check(s):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in s):
            raise Invalid("invalid_json", "lone surrogate")

    if isinstance(value, str):
        check(value)
    elif isinstance(value, list):
        for v in value:
            _check_strings(v)
    elif isinstance(value, Obj):
        for k, v in value.pairs:
            check(k)
            _check_strings(v)


def depth(value):
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, Obj):
        return 1 + max((depth(v) for _, v in value.pairs), default=0)
    return 0


def parse(raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid("invalid_json", "not UTF-8") from e
    if text.startswith("\ufeff"):
        raise Invalid("invalid_json", "byte order mark")
    try:
        value = json.loads(
            text,
            parse_float=Num,
            parse_int=Num,
            parse_constant=_constant,
            object_pairs_hook=_pairs,
        )
    except json.JSONDecodeError as e:
        raise Invalid("invalid_json", str(e)) from e
    _check_strings(value)
    if depth(value) > MAX_DEPTH:
        raise Invalid("too_deep", f"deeper than {MAX_DEPTH}")
    return value


# ---------------------------------------------------------------------------------------------
# Writing.


def string(s: str) -> str:
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = ['"']
    for c in s:
        if c in short:
            out.append(short[c])
        elif ord(c) < 0x20:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


NUMBER_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def number(text: str) -> str:
    """The plain exact decimal of a number text or decimal string."""
    if not NUMBER_TEXT.fullmatch(text):
        raise Invalid("invalid_number", text)
    sign, digits, exp = decimal.Decimal(text).as_tuple()
    digits = list(digits)
    while digits and digits[0] == 0:
        digits.pop(0)
    if not digits:
        return "0"
    while digits[-1] == 0:
        digits.pop()
        exp += 1
    zeros = exp if exp >= 0 else max(0, -exp - len(digits))
    if zeros > MAX_ZEROS:
        raise Invalid("number_out_of_range", text)
    ds = "".join(map(str, digits))
    if exp >= 0:
        body = ds + "0" * exp
    elif len(ds) > -exp:
        body = ds[:exp] + "." + ds[exp:]
    else:
        body = "0." + "0" * (-exp - len(ds)) + ds
    return ("-" if sign else "") + body


def type_name(v):
    if isinstance(v, Obj):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if isinstance(v, Num):
        return "number"
    if isinstance(v, bool):
        return "boolean"
    return "null"


def unexpected(v, want):
    return Invalid("unexpected_type", f"expected {want}, found {type_name(v)}")


def any_value(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Num):
        return number(v.text)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, list):
        return "[" + ",".join(any_value(x) for x in v) + "]"
    return members(v, lambda name: ("field", "any", name))


def members(obj: Obj, lookup, defaults=None, omit_empty=()) -> str:
    """An object: members sorted by the UTF-8 bytes of their (field) names, nulls and non-fields
    omitted; a member read under an alias is written under its field's name (both names at once
    are a duplicate); a field absent from the input takes its default's canonical text."""
    entries = {}
    for name, value in obj.pairs:
        what, spec, field = lookup(name)
        if what != "field":
            continue
        if field in entries:
            raise Invalid("duplicate_member", field)
        text = None if value is None else apply(value, spec)
        if field in omit_empty and text in ("[]", "{}", '""'):
            text = None
        entries[field] = text
    for field, text in (defaults or {}).items():
        if field not in entries:
            entries[field] = text
    out = [string(f) + ":" + t for f, t in sorted(entries.items(), key=lambda e: e[0].encode("utf-8"))
           if t is not None]
    return "{" + ",".join(out) + "}"


def spec_lookup(spec: dict):
    def lookup(name):
        if name not in spec:
            return ("unknown", None, name)
        d = spec[name]
        if d == "env":
            return ("env", None, name)
        if isinstance(d, dict) and "alias" in d:
            field = d["alias"]
            return ("field", field_spec(spec[field]), field)
        if isinstance(d, dict) and "member" in d and d["member"].get("unread"):
            return ("unknown", None, name)
        return ("field", field_spec(d), name)

    return lookup


def field_spec(d):
    """The value spec of a member descriptor (the inside of a `member` one)."""
    if isinstance(d, dict) and "member" in d:
        return d["member"]["spec"]
    return d


def spec_omit_empty(spec: dict) -> set:
    return {name for name, d in spec.items()
            if isinstance(d, dict) and "member" in d and d["member"].get("omit_empty")}


def spec_defaults(spec: dict) -> dict:
    return {name: d["member"]["default"] for name, d in spec.items()
            if isinstance(d, dict) and "member" in d and "default" in d["member"]}


BASE64_TEXT = re.compile(r"[A-Za-z0-9+/]*")


def base64_bytes(v) -> bytes:
    if isinstance(v, str):
        body = v.rstrip("=")
        padding = len(v) - len(body)
        if padding and len(v) % 4 != 0 or padding > 2 or not BASE64_TEXT.fullmatch(body):
            raise Invalid("invalid_base64", v)
        if len(body) % 4 == 1:
            raise Invalid("invalid_base64", v)
        padded = body + "=" * (-len(body) % 4)
        data = base64.b64decode(padded, validate=True)
        if base64.b64encode(data).decode() != padded:  # bits set beyond the data
            raise Invalid("invalid_base64", v)
        return data
    if isinstance(v, list):
        out = bytearray()
        for x in v:
            n = number(x.text) if isinstance(x, Num) else None
            if n is None or not n.isdigit() or int(n) > 255:
                raise Invalid("invalid_base64", "not a byte")
            out.append(int(n))
        return bytes(out)
    raise unexpected(v, "bytes")


TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?: ?(Z|z|([+-])([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?))?"
)


def valid_date(y, m, d):
    return 1 <= m <= 12 and 1 <= d <= calendar.monthrange(y, m)[1]


def timestamp(v) -> str:
    if not isinstance(v, str):
        raise unexpected(v, "a timestamp string")
    m = TIMESTAMP.fullmatch(v)
    if not m:
        raise Invalid("invalid_timestamp", v)
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac = (m.group(7) or "").rstrip("0")
    if not valid_date(y, mo, d) or h > 23 or mi > 59 or s > 60 or len(frac) > 9:
        raise Invalid("invalid_timestamp", v)
    offset = 0
    if m.group(9):
        oh, om, os_ = int(m.group(10)), int(m.group(11)), int(m.group(12) or 0)
        if oh > 23 or om > 59 or os_ > 59:
            raise Invalid("invalid_timestamp", v)
        offset = (oh * 3600 + om * 60 + os_) * (-1 if m.group(9) == "-" else 1)
    if y == 0:
        raise NotImplementedError("year 0000 is outside Python's datetime")
    local = datetime.datetime(y, mo, d, h, mi, min(s, 59))
    try:
        utc = local - datetime.timedelta(seconds=offset)
    except OverflowError as e:
        raise Invalid("invalid_timestamp", v) from e
    sec = 60 if s == 60 else utc.second
    text = utc.strftime("%Y-%m-%dT%H:%M:") + "%02d" % sec
    if len(str(utc.year)) != 4:
        raise NotImplementedError("years below 1000 format differently in strftime")
    return '"' + text + ("." + frac if frac else "") + 'Z"'


def date(v) -> str:
    if not isinstance(v, str):
        raise unexpected(v, "a date string")
    m = re.fullmatch(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", v)
    if not m or not valid_date(*(int(g) for g in m.groups())):
        raise Invalid("invalid_date", v)
    return '"' + v + '"'


HEX32 = r"[0-9A-Fa-f]{32}"
HYPHENATED = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
UUID = re.compile(rf"({HEX32}|{HYPHENATED}|\{{{HYPHENATED}\}}|\{{{HEX32}\}}|urn:uuid:{HYPHENATED}|urn:uuid:{HEX32})")


def uuid(v) -> str:
    if not isinstance(v, str):
        raise unexpected(v, "a UUID string")
    if not UUID.fullmatch(v):
        raise Invalid("invalid_uuid", v)
    h = re.sub(r"[^0-9A-Fa-f]", "", v.removeprefix("urn:uuid:")).lower()
    return '"%s-%s-%s-%s-%s"' % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def enum(v, variants: dict) -> str:
    def find(name):
        if name not in variants:
            raise Invalid("unknown_variant", name)
        return variants[name]

    if isinstance(v, str):
        if find(v) is not None:
            raise Invalid("invalid_variant", "needs a payload")
        return string(v)
    if isinstance(v, Obj) and len(v.pairs) == 1:
        name, payload = v.pairs[0]
        spec = find(name)
        if spec is None:
            if payload is not None:
                raise Invalid("invalid_variant", "unit variant with a payload")
            return string(name)
        return "{" + string(name) + ":" + apply(payload, spec) + "}"
    raise unexpected(v, "an enum")


def apply(v, spec) -> str:
    if v is None:
        return "null"
    if spec == "any":
        return any_value(v)
    if spec == "decimal":
        if isinstance(v, Num):
            return number(v.text)
        if isinstance(v, str):
            return number(v)
        raise unexpected(v, "a decimal")
    if spec == "base64":
        return '"' + base64.b64encode(base64_bytes(v)).decode() + '"'
    if spec == "timestamp":
        return timestamp(v)
    if spec == "date":
        return date(v)
    if spec == "uuid":
        return uuid(v)
    (kind, inner), = spec.items()
    if kind == "array":
        if not isinstance(v, list):
            raise unexpected(v, "an array")
        return "[" + ",".join(apply(x, inner) for x in v) + "]"
    if kind == "tuple":
        if not isinstance(v, list):
            raise unexpected(v, "a tuple")
        if len(v) != len(inner):
            raise Invalid("tuple_length", f"{len(v)} != {len(inner)}")
        return "[" + ",".join(apply(x, s) for x, s in zip(v, inner)) + "]"
    if kind == "set":
        if not isinstance(v, list):
            raise unexpected(v, "a set")
        texts = sorted({apply(x, inner).encode("utf-8") for x in v})
        return "[" + ",".join(t.decode("utf-8") for t in texts) + "]"
    if kind == "map":
        if not isinstance(v, Obj):
            raise unexpected(v, "a map")
        return members(v, lambda name: ("field", inner, name))
    if kind == "object":
        if not isinstance(v, Obj):
            raise unexpected(v, "an object")
        return members(v, spec_lookup(inner), spec_defaults(inner), spec_omit_empty(inner))
    if kind == "enum":
        return enum(v, inner)
    raise ValueError(f"unknown spec kind {kind}")


def canonical(raw: bytes, spec: dict) -> str:
    value = parse(raw)
    if not isinstance(value, Obj):
        raise unexpected(value, "an object at the top level")
    return members(value, spec_lookup(spec), spec_defaults(spec), spec_omit_empty(spec))


def f64_exact(value) -> bool:
    """Whether every number survives serde_json's `Value` (integers in i64/u64, else the shortest
    round-trip text of the nearest f64) with the same canonical text."""
    if isinstance(value, Num):
        t = value.text
        if re.fullmatch(r"-?[0-9]+", t) and -(2**63) <= int(t) < 2**64:
            return True
        f = float(t)
        if f in (float("inf"), float("-inf")):
            return False
        try:
            return number(t) == number(repr(f))
        except Invalid:
            return False
    if isinstance(value, list):
        return all(f64_exact(v) for v in value)
    if isinstance(value, Obj):
        return all(f64_exact(v) for _, v in value.pairs)
    return True


# ---------------------------------------------------------------------------------------------
# The cases. `input` is the raw body, exactly as sent.

ENV_NAMES = [
    "client_ip", "ip", "ip_address", "remote_addr", "remote_ip", "user_agent", "timestamp", "ts",
    "sent_at", "request_time", "nonce", "signature", "sig", "hmac", "request_id", "trace_id",
    "span_id", "x_forwarded_for", "forwarded_for",
]

ANY_V = {"v": "any"}


def nest(levels, leaf="1"):
    """`{"v":[[...leaf...]]}` with `levels` containers in all (the object counts)."""
    return '{"v":' + "[" * (levels - 1) + leaf + "]" * (levels - 1) + "}"


CASES = [
    # --- the contract's example and objects
    ("payment_example", '{"amount":"100.00","currency":"EUR","client_ip":"1.2.3.4","note":null}',
     {"amount": "decimal", "currency": "any", "client_ip": "env", "note": "any"}),
    ("key_order_ascii", '{"c":3,"a":1,"b":2}', {"a": "any", "b": "any", "c": "any"}),
    ("key_order_uppercase_before_lowercase", '{"b":1,"B":2,"a":3,"A":4,"_":5,"Z":6}',
     {k: "any" for k in ["a", "b", "A", "B", "_", "Z"]}),
    ("key_order_prefix_first", '{"ab":1,"a":2,"aa":3,"a0":4}', {k: "any" for k in ["a", "aa", "ab", "a0"]}),
    ("key_order_non_ascii_bytes", '{"😀":1,"中":2,"é":3,"z":4,"ÿ":5,"\\uff61":6}',
     {k: "any" for k in ["😀", "中", "é", "z", "ÿ", "\uff61"]}),
    ("key_order_nested_any", '{"v":{"z":{"b":1,"a":2},"Y":[{"d":1,"c":2}],"x":0}}', ANY_V),
    ("whitespace_removed", '\r\n {\n\t"a" :\t[ 1 ,\r\n 2 ] ,\n "b" : { "c" : true }\n}\n ',
     {"a": "any", "b": "any"}),
    ("escaped_member_name", '{"\\u0061":1,"a\\"b":2,"line\\nbreak":3}',
     {"a": "any", "a\"b": "any", "line\nbreak": "any"}),
    ("empty_objects_kept", '{"a":{},"b":{"c":null},"d":[]}', {"a": "any", "b": "any", "d": "any"}),
    ("booleans", '{"t":true,"f":false}', {"t": "any", "f": "any"}),
    # --- strings
    ("string_short_escapes", '{"v":"q\\" b\\\\ \\b \\f \\n \\r \\t"}', ANY_V),
    ("string_control_escapes_lowercase", '{"v":"\\u0000\\u0001\\u000B\\u001F\\u001e"}', ANY_V),
    ("string_needless_escapes_dropped", '{"v":"\\/ \\u00e9 \\u007f \\u2028 \\u0041"}', ANY_V),
    ("string_unicode_untouched", '{"nfc":"é","nfd":"e\u0301","emoji":"\\ud83d\\ude00 😀","cjk":"中文"}',
     {"nfc": "any", "nfd": "any", "emoji": "any", "cjk": "any"}),
    # --- numbers
    ("number_100_spellings", '{"a":100,"b":100.0,"c":100.00,"d":1e2,"e":1E+2,"f":10000e-2}',
     {k: "any" for k in "abcdef"}),
    ("decimal_string_100", '{"amount":"100.00"}', {"amount": "decimal"}),
    ("decimal_number_and_string_agree", '{"a":100.00,"b":"1e2","c":"100"}', {"a": "decimal", "b": "decimal", "c": "decimal"}),
    ("decimal_string_forms", '{"a":"+5","b":"5.","c":".5","d":"-0.00","e":"1.50E-3","f":"007.50"}',
     {k: "decimal" for k in "abcdef"}),
    ("number_trailing_zero_fraction", '{"v":0.10}', ANY_V),
    ("number_negative_zero", '{"a":-0,"b":-0.0,"c":-0e10,"d":"-0"}',
     {"a": "any", "b": "any", "c": "any", "d": "decimal"}),
    ("number_negative_exponents", '{"a":1.5e-7,"b":123e-2,"c":-5E-1,"d":25e-1}', {k: "any" for k in "abcd"}),
    ("number_positive_exponents", '{"a":1e21,"b":12.5e3,"c":-1.23E+5}', {k: "any" for k in "abc"}),
    ("number_integer_limits", '{"u":18446744073709551615,"i":-9223372036854775808,"z":0}',
     {"u": "any", "i": "any", "z": "any"}),
    ("number_f64_shortest_texts", '{"a":0.1,"b":0.30000000000000004,"c":1.7976931348623157e308,"d":5e-324}',
     {k: "any" for k in "abcd"}),
    ("number_big_integers_raw", '{"a":123456789012345678901234567890,"b":-99999999999999999999999,"c":18446744073709551616}',
     {k: "any" for k in "abc"}),
    ("number_long_decimals_raw", '{"a":3.14159265358979323846264338327950288,"b":0.1000000000000000055511151231257827,"c":"12345678901234567890.10"}',
     {"a": "any", "b": "decimal", "c": "decimal"}),
    ("number_exponent_limit", '{"v":1e1100}', ANY_V),
    # --- null and absence
    ("null_top_level_omitted", '{"a":null,"b":1,"c":null}', {"a": "any", "b": "any", "c": "decimal"}),
    ("absent_equals_null", '{"b":1}', {"a": "any", "b": "any", "c": "decimal"}),
    ("null_nested_omitted", '{"o":{"x":null,"y":1},"a":{"p":null,"q":{"r":null}}}',
     {"o": {"object": {"x": "any", "y": "any"}}, "a": "any"}),
    ("null_in_arrays_kept", '{"a":[1,null,2],"d":["1.0",null],"n":[null]}',
     {"a": "any", "d": {"array": "decimal"}, "n": "any"}),
    ("null_in_map_omitted", '{"m":{"a":null,"b":"2.0"}}', {"m": {"map": "decimal"}}),
    # --- other names and defaults (serde's alias / rename(deserialize) and default)
    ("alias_read_as_its_field", '{"amt":"5.0","cur":"EUR"}',
     {"amount": "decimal", "amt": {"alias": "amount"}, "cur": {"alias": "currency"}, "currency": "any"}),
    ("alias_sorted_by_field_name", '{"z":1,"b":2}', {"a": "any", "z": {"alias": "a"}, "b": "any"}),
    ("default_when_absent", '{"amount":1}',
     {"amount": "any", "currency": {"member": {"spec": "any", "default": '"EUR"'}}}),
    ("default_not_when_present", '{"amount":1,"currency":"USD"}',
     {"amount": "any", "currency": {"member": {"spec": "any", "default": '"EUR"'}}}),
    ("default_in_nested_object", '{"o":{}}',
     {"o": {"object": {"tags": {"member": {"spec": {"array": "any"}, "default": "[]"}}}}}),
    ("unread_own_name_is_unknown", '{"amount":5,"region":"x"}',
     {"amount": {"member": {"spec": "any", "unread": True}}, "amt": {"alias": "amount"},
      "region": {"member": {"spec": "any", "default": '"eu"', "unread": True}}}),
    ("omit_empty_left_out", '{"tags":[],"meta":{},"note":"","keep":[]}',
     {"tags": {"member": {"spec": {"array": "any"}, "omit_empty": True}},
      "meta": {"member": {"spec": {"map": "any"}, "omit_empty": True}},
      "note": {"member": {"spec": "any", "omit_empty": True}}, "keep": {"array": "any"}}),
    ("omit_empty_kept_when_not_empty", '{"tags":["a"]}',
     {"tags": {"member": {"spec": {"array": "any"}, "omit_empty": True}}}),
    ("unread_read_through_alias", '{"amt":5}',
     {"amount": {"member": {"spec": "any", "unread": True}}, "amt": {"alias": "amount"}}),
    # --- bytes
    ("base64_padded_string", '{"b":"aGkhPw=="}', {"b": "base64"}),
    ("base64_unpadded_string", '{"b":"aGkhPw","c":"YQ","d":"YWI"}', {"b": "base64", "c": "base64", "d": "base64"}),
    ("base64_byte_array", '{"b":[104,105,33,63],"c":[251,255,191,0]}', {"b": "base64", "c": "base64"}),
    ("base64_empty", '{"a":"","b":[]}', {"a": "base64", "b": "base64"}),
    ("base64_array_and_string_agree", '{"a":[0,1,2,253,254,255],"b":"AAEC/f7/"}', {"a": "base64", "b": "base64"}),
    # --- sets and maps
    ("set_strings_sorted_deduplicated", '{"tags":["b","a","c","a"]}', {"tags": {"set": "any"}}),
    ("set_sorted_by_text_not_value", '{"s":[10,9,-1,"9.0"]}', {"s": {"set": "decimal"}}),
    ("set_mixed_types", '{"s":[{"a":1},[2],3,"x",null,true,false]}', {"s": {"set": "any"}}),
    ("set_of_objects_member_order", '{"s":[{"b":1,"a":2},{"a":2,"b":1},{"a":1}]}', {"s": {"set": "any"}}),
    ("set_of_uuids", '{"s":["B0000000-0000-0000-0000-000000000000","a0000000-0000-0000-0000-000000000000","b0000000000000000000000000000000"]}',
     {"s": {"set": "uuid"}}),
    ("map_decimal_values", '{"m":{"b":"1.0","A":2,"a":3.50}}', {"m": {"map": "decimal"}}),
    ("map_of_objects", '{"m":{"y":{"q":1,"drop":2},"x":{"q":"5"}}}', {"m": {"map": {"object": {"q": "decimal"}}}}),
    # --- nested objects, tuples, enums
    ("nested_object_whitelist",
     '{"lines":[{"sku":"A","price":"9.90","trace_id":"t1","x":1},{"price":null,"sku":"B"}],"total":"9.90"}',
     {"lines": {"array": {"object": {"sku": "any", "price": "decimal", "trace_id": "env"}}}, "total": "decimal"}),
    ("nested_objects_three_levels", '{"a":{"b":{"c":{"d":"1.10","e":"x"},"f":1},"g":2}}',
     {"a": {"object": {"b": {"object": {"c": {"object": {"d": "decimal"}}}}}}}),
    ("tuple_per_position", '{"t":["1.0","1.0",[1,2]]}', {"t": {"tuple": ["decimal", "any", "base64"]}}),
    ("enum_unit_string", '{"m":"Cash"}', {"m": {"enum": {"Cash": None, "Card": "any"}}}),
    ("enum_unit_object_null", '{"m":{"Cash":null}}', {"m": {"enum": {"Cash": None, "Card": "any"}}}),
    ("enum_struct_variant", '{"m":{"Card":{"last4":"4242","cvc":"123"}}}',
     {"m": {"enum": {"Cash": None, "Card": {"object": {"last4": "any"}}}}}),
    ("enum_newtype_decimal", '{"m":{"Amount":"10.50"},"n":{"Amount":null}}',
     {"m": {"enum": {"Amount": "decimal"}}, "n": {"enum": {"Amount": "decimal"}}}),
    # --- environment and unknown fields
    ("env_fields_dropped", "{" + ",".join(f'"{n}":"x{i}"' for i, n in enumerate(ENV_NAMES)) + ',"amount":1}',
     dict({n: "env" for n in ENV_NAMES}, amount="decimal")),
    ("env_names_hashed_when_whitelisted", '{"timestamp":"t","nonce":"n"}', {"timestamp": "any", "nonce": "any"}),
    ("non_whitelisted_dropped", '{"keep":1,"drop":{"deep":[1,2,{"x":null}]},"other":"y","Keep":2}',
     {"keep": "any"}),
    ("empty_spec", '{"a":1,"b":2}', {}),
    # --- timestamps, dates, UUIDs
    ("timestamp_fraction_trimmed", '{"t":"2024-01-02T03:04:05.120Z","u":"2024-01-02T03:04:05.000Z"}',
     {"t": "timestamp", "u": "timestamp"}),
    ("timestamp_positive_offset_crosses_year", '{"t":"2024-01-01T00:30:00+01:00"}', {"t": "timestamp"}),
    ("timestamp_negative_offset", '{"t":"2024-01-02T03:04:05.123456789-05:30"}', {"t": "timestamp"}),
    ("timestamp_offset_into_leap_day", '{"t":"2024-02-28T23:00:00-02:00"}', {"t": "timestamp"}),
    ("timestamp_lowercase_and_space", '{"a":"2024-01-02t03:04:05z","b":"2024-01-02 03:04:05-00:00"}',
     {"a": "timestamp", "b": "timestamp"}),
    ("timestamp_time_crate_forms", '{"b":"2024-01-02 03:04:05.5 +02:00:00","c":"2024-01-02 03:04:05.0"}',
     {"b": "timestamp", "c": "timestamp"}),
    ("timestamp_leap_second", '{"t":"2016-12-31T23:59:60.5Z"}', {"t": "timestamp"}),
    ("date_kept", '{"d":"2024-02-29"}', {"d": "date"}),
    ("uuid_forms_lowercased", '{"a":"67E55044-10B1-426F-9247-BB680E5FE0C8","b":"67e5504410b1426f9247bb680e5fe0c8","c":"{67E55044-10B1-426F-9247-BB680E5FE0C8}","d":"urn:uuid:67e55044-10b1-426f-9247-bb680e5fe0c8"}',
     {k: "uuid" for k in "abcd"}),
    # --- limits
    ("depth_64_accepted", nest(64), ANY_V),
    # --- everything together (docs/fingerprint.md)
    ("spec_format_example",
     '{"timestamp":"2024-01-02T03:04:05Z","currency":"EUR","amount":"100.00","client_ip":"1.2.3.4",'
     '"lines":[{"sku":"A","qty":2.0,"trace_id":"x"}],"tags":["b","a"],"method":{"Card":{"last4":"4242"}},'
     '"note":null,"debug":true}',
     {"amount": "decimal", "currency": "any",
      "lines": {"array": {"object": {"sku": "any", "qty": "decimal", "trace_id": "env"}}},
      "tags": {"set": "any"}, "method": {"enum": {"Cash": None, "Card": {"object": {"last4": "any"}}}},
      "client_ip": "env", "timestamp": "env"}),
]

INVALID = [
    # --- strict JSON
    ("json_leading_zero", '{"a":01}', ANY_V, "invalid_json"),
    ("json_trailing_dot", '{"v":1.}', ANY_V, "invalid_json"),
    ("json_leading_dot", '{"v":.5}', ANY_V, "invalid_json"),
    ("json_plus_sign", '{"v":+1}', ANY_V, "invalid_json"),
    ("json_empty_exponent", '{"v":1e}', ANY_V, "invalid_json"),
    ("json_nan", '{"v":NaN}', ANY_V, "invalid_json"),
    ("json_infinity", '{"v":-Infinity}', ANY_V, "invalid_json"),
    ("json_trailing_comma_object", '{"v":1,}', ANY_V, "invalid_json"),
    ("json_trailing_comma_array", '{"v":[1,]}', ANY_V, "invalid_json"),
    ("json_comment", '{"v":1 /* one */}', ANY_V, "invalid_json"),
    ("json_single_quotes", "{'v':1}", ANY_V, "invalid_json"),
    ("json_raw_control_character", '{"v":"a\tb"}', ANY_V, "invalid_json"),
    ("json_lone_surrogate", '{"v":"\\ud800"}', ANY_V, "invalid_json"),
    ("json_byte_order_mark", '\ufeff{"v":1}', ANY_V, "invalid_json"),
    ("json_trailing_data", '{"v":1} {}', ANY_V, "invalid_json"),
    ("duplicate_member", '{"v":1,"v":2}', ANY_V, "duplicate_member"),
    ("duplicate_member_after_unescaping", '{"v":{"a":1,"\\u0061":1}}', ANY_V, "duplicate_member"),
    ("too_deep", nest(65), ANY_V, "too_deep"),
    ("too_deep_in_dropped_member", nest(65).replace('"v"', '"dropped"'), ANY_V, "too_deep"),
    ("top_level_not_object", "[1,2]", ANY_V, "unexpected_type"),
    # --- numbers
    ("decimal_string_comma", '{"v":"1,5"}', {"v": "decimal"}, "invalid_number"),
    ("decimal_string_space", '{"v":" 1"}', {"v": "decimal"}, "invalid_number"),
    ("decimal_string_underscore", '{"v":"1_000"}', {"v": "decimal"}, "invalid_number"),
    ("decimal_string_nan", '{"v":"NaN"}', {"v": "decimal"}, "invalid_number"),
    ("decimal_boolean", '{"v":true}', {"v": "decimal"}, "unexpected_type"),
    ("number_too_large", '{"v":1e1101}', ANY_V, "number_out_of_range"),
    ("number_too_small", '{"v":"1e-1102"}', {"v": "decimal"}, "number_out_of_range"),
    # --- bytes
    ("base64_bad_character", '{"b":"aGk*"}', {"b": "base64"}, "invalid_base64"),
    ("base64_url_safe_alphabet", '{"b":"-_8="}', {"b": "base64"}, "invalid_base64"),
    ("base64_partial_padding", '{"b":"aGkhPw="}', {"b": "base64"}, "invalid_base64"),
    ("base64_trailing_bits", '{"b":"aGkhPx=="}', {"b": "base64"}, "invalid_base64"),
    ("base64_byte_out_of_range", '{"b":[1,256]}', {"b": "base64"}, "invalid_base64"),
    ("base64_byte_fraction", '{"b":[1.5]}', {"b": "base64"}, "invalid_base64"),
    # --- other kinds
    ("timestamp_without_seconds", '{"t":"2024-01-02T03:04Z"}', {"t": "timestamp"}, "invalid_timestamp"),
    ("timestamp_nonexistent_day", '{"t":"2023-02-29T00:00:00Z"}', {"t": "timestamp"}, "invalid_timestamp"),
    ("timestamp_beyond_nanoseconds", '{"t":"2024-01-02T03:04:05.1234567891Z"}', {"t": "timestamp"}, "invalid_timestamp"),
    ("date_with_time", '{"d":"2024-01-02T00:00:00Z"}', {"d": "date"}, "invalid_date"),
    ("uuid_too_short", '{"u":"67e55044-10b1-426f-9247"}', {"u": "uuid"}, "invalid_uuid"),
    ("enum_unknown_variant", '{"m":"Cheque"}', {"m": {"enum": {"Cash": None}}}, "unknown_variant"),
    ("enum_unit_with_payload", '{"m":{"Cash":1}}', {"m": {"enum": {"Cash": None}}}, "invalid_variant"),
    ("tuple_wrong_length", '{"t":[1]}', {"t": {"tuple": ["any", "any"]}}, "tuple_length"),
    ("alias_and_field_together", '{"amt":1,"amount":1}', {"amount": "any", "amt": {"alias": "amount"}},
     "duplicate_member"),
]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def raw_only(raw: bytes) -> bool:
    try:
        return not f64_exact(parse(raw))
    except Invalid as e:
        # serde_json cannot parse what the strict parser rejects, and keeps the last of
        # duplicate members silently.
        return e.kind in ("invalid_json", "duplicate_member")


def build():
    names = set()
    cases = []
    for name, body, spec in CASES:
        assert name not in names, name
        names.add(name)
        raw = body.encode("utf-8")
        text = canonical(raw, spec)
        case = {"name": name, "input": body, "spec": spec, "canonical": text, "sha256": sha256(text)}
        if raw_only(raw):
            case["raw_only"] = True
        cases.append(case)
    invalid = []
    for name, body, spec, want in INVALID:
        assert name not in names, name
        names.add(name)
        raw = body.encode("utf-8")
        try:
            got = canonical(raw, spec)
        except Invalid as e:
            got = e.kind
        assert got == want, f"{name}: expected {want}, the reference implementation says {got}"
        case = {"name": name, "input": body, "spec": spec, "error": got}
        if raw_only(raw):
            case["raw_only"] = True
        invalid.append(case)
    return {
        "description": "Request fingerprint test vectors: see docs/fingerprint.md. Generated by "
        "tests/vectors/generate.py; do not edit by hand.",
        "algorithm": "sha256 over the UTF-8 bytes of `canonical`, lowercase hex",
        "cases": cases,
        "invalid": invalid,
    }


def main():
    out = Path(__file__).with_name("fingerprint.json")
    text = json.dumps(build(), ensure_ascii=False, indent=2) + "\n"
    if "--check" in sys.argv[1:]:
        if out.read_text(encoding="utf-8") != text:
            sys.exit(f"{out} is out of date: run {Path(__file__).name}")
        return
    out.write_text(text, encoding="utf-8")
    data = json.loads(text)
    print(f"wrote {out}: {len(data['cases'])} cases, {len(data['invalid'])} invalid cases")


if __name__ == "__main__":
    main()
