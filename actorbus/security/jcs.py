"""JCS, the JSON Canonicalization Scheme (RFC 8785): the bytes that get signed.

No JCS package is installed, and the signed objects are small: strings, ints,
bools, null, nested arrays and objects (floats are handled too, the ES6 way).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec

from actorbus.codecs.errors import EncodeError


def jcs(value: Any) -> bytes:
    """The RFC 8785 canonical JSON of ``value``, UTF-8 encoded."""
    try:
        return _jcs(value).encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: not well-formed Unicode
        raise EncodeError(f"JCS input is not well-formed Unicode: {exc}") from exc


def _jcs(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, int):
        return str(value) if abs(value) <= 2**53 else _es6_number(float(value))
    if isinstance(value, float):
        return _es6_number(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        return _jcs_object(value)
    raise EncodeError(f"JCS cannot encode a {type(value).__name__}")


def _jcs_object(obj: dict[Any, Any]) -> str:
    if not all(isinstance(k, str) for k in obj):
        raise EncodeError("JCS object keys must be strings")
    keys = sorted(obj, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    return "{" + ",".join(f"{_jcs(k)}:{_jcs(obj[k])}" for k in keys) + "}"


def _es6_number(value: float) -> str:
    """ECMAScript Number::toString, which JCS prescribes for numbers."""
    if value != value or value in (float("inf"), float("-inf")):
        raise EncodeError("JCS cannot encode NaN or Infinity")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    tup = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, tup.digits))
    k = len(digits)
    n = int(tup.exponent) + k  # value = 0.digits * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    exp = n - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"
