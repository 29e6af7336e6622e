"""Typed option values: one rule per option, used for command-line flags, ``--config`` files
and ``dhash run`` pipeline steps alike.

A flag's text and a TOML value go through the same ``type`` callable of the option's
argparse action; a TOML value must also have the TOML type the option expects (an integer
option takes ``bits = 12``, not ``12.7`` or ``"12"``; a switch takes ``true``/``false``, not
``"false"``). Every refusal is an ``InputError``: one line naming the key and the fix.
"""
from __future__ import annotations

import argparse
import json

from pipeline.errors import InputError


class OptionParser(argparse.ArgumentParser):
    """argparse whose errors are one-line InputErrors (exit 2 via the CLI), not usage dumps."""

    def error(self, message):
        raise InputError(f"{self.prog}: {message}; see `{self.prog} --help`")


def _integer(text, low: int, what: str) -> int:
    if isinstance(text, bool):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text) -> int:
    return _integer(text, 1, "a positive integer")


def non_negative_int(text) -> int:
    return _integer(text, 0, "an integer >= 0")


def _real(text, positive: bool) -> float:
    what = "a positive number" if positive else "a number >= 0"
    if isinstance(text, bool):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not value == value or value in (float("inf"), float("-inf")) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_float(text) -> float:
    return _real(text, True)


def non_negative_float(text) -> float:
    return _real(text, False)


def positive_int_list(text) -> list[int]:
    """``16,32,64`` (or a TOML array) -> [16, 32, 64]; every item a positive integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = [text]                     # TOML: bits = 16 is a list of one
    items = text if isinstance(text, list) else [v for v in str(text).split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of positive integers, got nothing")
    try:
        return [positive_int(v) for v in items]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of positive integers, got {text!r}") from None


def name_list(text) -> list[str]:
    items = text if isinstance(text, list) else str(text).split(",")
    names = [str(v).strip().lower() for v in items if str(v).strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names, got nothing")
    return names


def topology(value):
    """A topology name, or (config files only) an explicit edge list [[0, 1], [1, 2], ...]."""
    if isinstance(value, list):
        if not all(isinstance(e, list) and len(e) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in e) for e in value):
            raise argparse.ArgumentTypeError(f"expected a topology name or a list of [i, j] node pairs, got {value!r}")
        return value
    return str(value)


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


# the TOML types each option type accepts (others: str)
_TOML_TYPES = {positive_int: (int,), non_negative_int: (int,), positive_float: (int, float),
               non_negative_float: (int, float), positive_int_list: (list, str, int), name_list: (list, str),
               json_object: (dict, str), topology: (str, list)}
_TOML_NAMES = {int: "an integer", float: "a number", list: "an array", str: "a string", dict: "a table",
               bool: "true or false"}


def toml_value(action: argparse.Action, key: str, value, where: str):
    """A TOML value for ``action`` checked and converted like the flag would be."""
    if action.nargs == 0:   # a switch (store_true)
        if not isinstance(value, bool):
            raise InputError(f"{where}: {key} must be true or false, got {value!r}; write {key} = true")
        return value
    accepted = _TOML_TYPES.get(action.type, (str,))
    if isinstance(value, bool) or not isinstance(value, accepted):
        want = " or ".join(_TOML_NAMES[t] for t in accepted)
        hint = f"; write {key} = {int(value)}" if isinstance(value, float) and int in accepted else ""
        raise InputError(f"{where}: {key} must be {want}, got {value!r}{hint}")
    if action.type is not None:
        try:
            value = action.type(value)
        except (argparse.ArgumentTypeError, InputError, ValueError, TypeError) as exc:
            raise InputError(f"{where}: bad value for {key} ({exc})") from None
    if action.choices is not None and value not in action.choices:
        raise InputError(f"{where}: {key} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value
