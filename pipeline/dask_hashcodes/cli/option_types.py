"""An option of a ``dhash`` command and the types of its values.

A value type is a callable that takes the flag's text or a TOML value and returns the typed
value, raising ``argparse.ArgumentTypeError`` with what it expected; ``toml_types`` says which
TOML types a config file may give for it and ``json_type`` its JSON schema. ``Option`` is one
row of the option table (``dask_hashcodes.cli.options``): a TOML value goes through the same
type as the flag's text, after a check of its TOML type.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from dataclasses import dataclass

from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.constraints import Interval


def positive_int_list(text) -> list[int]:
    """``16,32,64`` (or a TOML array) -> [16, 32, 64]; every item a positive integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = [text]  # TOML: bits = 16 is a list of one
    items = text if isinstance(text, list) else [v for v in str(text).split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of positive integers, got nothing")
    try:
        return [positive_int(v) for v in items]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of positive integers, got {text!r}"
        ) from None


# Longest code length accepted. Hash codes exist to be much smaller than the vectors they
# index: 4096 bits (512 bytes a row) is already the size of a 128-d float32 vector, and
# every method keeps (features, bits) float64 projections and (rows, bits) codes in memory.
MAX_BITS = 4096


def _check_bits(value: int) -> int:
    if value > MAX_BITS:
        raise argparse.ArgumentTypeError(f"expected a code length of 1 to {MAX_BITS} bits, got {value}")
    return value


def bit_count(text) -> int:
    """A code length: a positive integer up to ``MAX_BITS``."""
    return _check_bits(positive_int(text))


def bit_counts(text) -> list[int]:
    """Code lengths, comma-separated (or a TOML array), each 1 to ``MAX_BITS``."""
    return [_check_bits(v) for v in positive_int_list(text)]


def name_list(text) -> list[str]:
    items = text if isinstance(text, list) else str(text).split(",")
    names = [str(v).strip().lower() for v in items if str(v).strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names, got nothing")
    return names


def json_object(text) -> dict:
    """``--storage-options '{"anon": true}'`` -> dict (a TOML table passes through)."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def date(text) -> str:
    """YYYY-MM-DD (a TOML date too)."""
    try:
        return dt.date.fromisoformat(str(text)).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def toml_scalar(text_: str):
    """``--set`` values are TOML scalars when they parse as one (numbers, true/false), else strings."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text_}")["v"]
    except tomllib.TOMLDecodeError:
        return text_


def text(value) -> str:
    return str(value)


@dataclass(frozen=True)
class Number:
    """A number option read from an estimator's ``Interval`` constraint: the flag's text or
    a TOML number, converted and range-checked before any work starts. Integer bounds are
    kept closed (an open bound 0 is a closed bound 1)."""

    integer: bool
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    @classmethod
    def of(cls, interval: Interval) -> Number:
        low, high, low_open, high_open = interval.low, interval.high, interval.low_open, interval.high_open
        if interval.integer:  # closed integer bounds read best: "an integer >= 2", not "> 1"
            low = None if low is None else math.floor(low) + 1 if low_open or low != int(low) else int(low)
            high = None if high is None else math.ceil(high) - 1 if high_open or high != int(high) else int(high)
            low_open = high_open = False
        return cls(interval.integer, low, high, low_open, high_open)

    def narrowed(self, other: Number) -> Number:
        """The values both accept (a flag shared by methods whose ranges differ)."""
        if other.integer != self.integer:
            raise TypeError("an integer and a real parameter cannot share a flag")
        low, low_open = self.low, self.low_open
        if other.low is not None and (low is None or (other.low, other.low_open) > (low, low_open)):
            low, low_open = other.low, other.low_open
        high, high_open = self.high, self.high_open
        if other.high is not None and (high is None or (other.high, not other.high_open) < (high, not high_open)):
            high, high_open = other.high, other.high_open
        return Number(self.integer, low, high, low_open, high_open)

    @property
    def what(self) -> str:
        """The values accepted, as error messages say them."""
        kind = "an integer" if self.integer else "a number"
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            if self.integer:
                return f"an integer from {low} to {high}"
            return f"a number in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            if self.integer and self.low == 1:
                return "a positive integer"
            if not self.integer and self.low == 0 and self.low_open:
                return "a positive number"
            return f"{kind} {'>' if self.low_open else '>='} {low}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {high}"
        return kind

    def __call__(self, text):
        if isinstance(text, bool):
            raise argparse.ArgumentTypeError(f"expected {self.what}, got {text!r}")
        try:
            value = int(str(text).strip()) if self.integer else float(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.what}, got {text!r}") from None
        if not math.isfinite(value) or not self._holds(value):
            raise argparse.ArgumentTypeError(f"expected {self.what}, got {value if self.integer else repr(text)}")
        return value

    def _holds(self, value) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    @property
    def toml_types(self) -> tuple:
        return (int,) if self.integer else (int, float)

    def json(self) -> dict:
        prop = {"type": "integer" if self.integer else "number"}
        if self.low is not None:
            prop["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        if self.high is not None:
            prop["exclusiveMaximum" if self.high_open else "maximum"] = self.high
        return prop


def _number(value) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# the counts and sizes of the option table
positive_int = Number(integer=True, low=1)
non_negative_int = Number(integer=True, low=0)
positive_float = Number(integer=False, low=0, low_open=True)


@dataclass(frozen=True)
class NameOrPairs:
    """A name among ``names``, or (config files only) an explicit edge list [[0, 1], [1, 2], ...]."""

    names: tuple

    def __call__(self, value):
        if isinstance(value, list):
            if not all(
                isinstance(e, list) and len(e) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in e)
                for e in value
            ):
                raise argparse.ArgumentTypeError(f"expected a name or a list of [i, j] node pairs, got {value!r}")
            return value
        if str(value) not in self.names:
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(self.names)} (or, in a config file, a list of [i, j] node pairs), "
                f"got {value!r}"
            )
        return str(value)

    toml_types = (str, list)

    def json(self) -> dict:
        pairs = {
            "type": "array",
            "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        }
        return {"oneOf": [{"type": "string", "enum": list(self.names)}, pairs]}


def boolean(text) -> bool:
    """true or false (a TOML boolean, or the flag's text)."""
    if isinstance(text, bool):
        return text
    spelt = str(text).strip().lower()
    if spelt not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return spelt == "true"


def show_value(value) -> str:
    """A default as the help prints it (TOML's spelling of booleans, none for None)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


# the TOML types each option type accepts (others: str)
_TOML_TYPES = {
    positive_int_list: (list, str, int),
    bit_count: (int,),
    bit_counts: (list, str, int),
    name_list: (list, str),
    json_object: (dict, str),
    boolean: (bool,),
    date: (str, dt.date),
}
_TOML_NAMES = {
    int: "an integer",
    float: "a number",
    list: "an array",
    str: "a string",
    dict: "a table",
    bool: "true or false",
    dt.date: "a date",
}
_JSON_TYPES = {
    positive_int_list: {
        "oneOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 1}},
            {"type": "integer", "minimum": 1},
            {"type": "string"},
        ]
    },
    bit_count: {"type": "integer", "minimum": 1, "maximum": MAX_BITS},
    bit_counts: {
        "oneOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": MAX_BITS}},
            {"type": "integer", "minimum": 1, "maximum": MAX_BITS},
            {"type": "string"},
        ]
    },
    name_list: {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]},
    json_object: {"oneOf": [{"type": "object"}, {"type": "string"}]},
    boolean: {"type": "boolean"},
    date: {"type": "string", "format": "date"},
    text: {"type": "string"},
}


def toml_types(type_) -> tuple:
    """The TOML types a value of an option of this type may have."""
    return getattr(type_, "toml_types", None) or _TOML_TYPES.get(type_, (str,))


def json_type(type_) -> dict:
    """The JSON schema of a value of this type (a config file's value)."""
    return type_.json() if hasattr(type_, "json") else dict(_JSON_TYPES[type_])


@dataclass(frozen=True)
class Option:
    """One option. ``default`` may be a dict {command: default}; ``required`` names the
    commands that need it (from the command line or the config). A method option sets the
    estimator parameter ``param`` of the estimators ``methods`` (base method names); its
    ``default`` is None (not given: the estimator's own default, ``estimator_defaults``);
    ``short_for`` names the ``--{method}-{param}`` flags a short flag stands for.
    ``applies``: the conditions (``With``, ``Without``, ...) under which the option does
    something, all of which must hold; given where one does not, it is refused
    (``refuse_unused``) rather than ignored."""

    name: str
    commands: tuple
    help: str
    type: object = text
    default: object = None
    required: tuple = ()
    switch: bool = False
    positional: bool = False
    choices: tuple | None = None
    group: str = "options"
    param: str | None = None
    methods: tuple = ()
    estimator_defaults: dict | None = None
    dest_name: str | None = None
    repeat: bool = False
    metavar: str | None = None
    applies: tuple = ()
    short_for: tuple = ()

    @property
    def dest(self) -> str:
        return self.dest_name or self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def default_for(self, command: str):
        if isinstance(self.default, dict):
            return self.default.get(command)
        return False if self.switch and self.default is None else self.default

    def parse(self, value, where: str):
        """A TOML value checked and converted like the flag's text would be."""
        key = self.name
        if self.switch:
            if not isinstance(value, bool):
                # suggest the boolean the value spells ("false" -> false), not always true
                spelt = str(value).strip().lower()
                fix = f"{key} = {spelt}" if spelt in ("true", "false") else f"{key} = true or {key} = false"
                raise InputError(
                    f"{where}: {key} must be true or false, got {value!r}; write {fix} (a boolean, unquoted)"
                )
            return value
        accepted = toml_types(self.type)
        if (isinstance(value, bool) and bool not in accepted) or not isinstance(value, accepted):
            want = " or ".join(_TOML_NAMES[t] for t in accepted)
            hint = f"; write {key} = {int(value)}" if isinstance(value, float) and int in accepted else ""
            raise InputError(f"{where}: {key} must be {want}, got {value!r}{hint}")
        try:
            value = self.type(value)
        except (argparse.ArgumentTypeError, InputError, ValueError, TypeError) as exc:
            raise InputError(f"{where}: bad value for {key} ({exc})") from None
        if self.choices is not None and value not in self.choices:
            raise InputError(f"{where}: {key} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        return value
