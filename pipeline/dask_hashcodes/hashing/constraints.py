"""What an estimator's parameters accept, and what its docstring says they mean.

Each estimator lists the values a parameter accepts in ``_parameter_constraints``: a list of
constraints, any of which may hold. A constraint is one of

* ``Interval(Integral or Real, low, high, closed=...)``: a number in a range (``None``: no
  bound on that side; ``closed`` names the bounds included: "left", "right", "both" or
  "neither");
* ``Options({...})``: one of a few names;
* ``BOOLEAN``: true or false; ``ARRAY_LIKE``: a sequence or array;
* a Python type (``str``, ``dict``, ``list``, ``tuple``): an instance of it;
* ``None``: the value None (the parameter's "decide from the data" or "not given").

``validate_params`` checks an estimator's parameters against them before a fit; a value no
constraint accepts is an ``InvalidParameter``: one line naming the parameter, the estimator,
what it accepts and the value given. The command line reads the same constraints for its
flags' value types, and ``parameter_docs`` reads the numpydoc ``Parameters`` section of the
estimator's docstring for their help, so the estimator is the one place a parameter is
described.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from dask_hashcodes.errors import InputError


class InvalidParameter(InputError, TypeError):
    """A parameter value its estimator does not accept: a one-line InputError (a ValueError)
    and a TypeError, the two errors scikit-learn's contract lets ``fit`` raise for one."""


@dataclass(frozen=True)
class Interval:
    """A number of ``type`` (``Integral`` or ``Real``) from ``low`` to ``high`` (None: no
    bound), the bounds ``closed`` names included. A bool is not a number here."""

    type: type
    low: float | None
    high: float | None
    closed: str = "left"

    def __post_init__(self):
        if self.type not in (Integral, Real, int, float):
            raise TypeError(f"Interval type must be Integral or Real, got {self.type!r}")
        if self.closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be left, right, both or neither, got {self.closed!r}")

    @property
    def integer(self) -> bool:
        return self.type in (Integral, int)

    @property
    def low_open(self) -> bool:
        return self.low is not None and self.closed in ("right", "neither")

    @property
    def high_open(self) -> bool:
        return self.high is not None and self.closed in ("left", "neither")

    def holds(self, value) -> bool:
        if isinstance(value, bool | np.bool_) or not isinstance(value, Integral if self.integer else Real):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    def __str__(self) -> str:
        low = "-inf" if self.low is None else _bound(self.low)
        high = "inf" if self.high is None else _bound(self.high)
        return (
            f"{'an int' if self.integer else 'a float'} in the range "
            f"{'(' if self.low is None or self.low_open else '['}{low}, {high}"
            f"{')' if self.high is None or self.high_open else ']'}"
        )


def _bound(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Options:
    """One of a few names (strings)."""

    options: frozenset

    def __init__(self, options):
        object.__setattr__(self, "options", frozenset(options))

    def holds(self, value) -> bool:
        return isinstance(value, str) and value in self.options

    def __str__(self) -> str:
        return f"a str among {{{', '.join(repr(o) for o in sorted(self.options))}}}"


@dataclass(frozen=True)
class _Boolean:
    def holds(self, value) -> bool:
        return isinstance(value, bool | np.bool_)

    def __str__(self) -> str:
        return "a bool"


@dataclass(frozen=True)
class _ArrayLike:
    def holds(self, value) -> bool:
        return hasattr(value, "__array__") or (hasattr(value, "__len__") and not isinstance(value, str | dict))

    def __str__(self) -> str:
        return "an array-like"


BOOLEAN = _Boolean()
ARRAY_LIKE = _ArrayLike()


def _holds(constraint, value) -> bool:
    if constraint is None:
        return value is None
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.holds(value)


def _describe(constraint) -> str:
    if constraint is None:
        return "None"
    if isinstance(constraint, type):
        return f"a {constraint.__name__}"
    return str(constraint)


def validate_params(owner: str, constraints: dict, params: dict) -> None:
    """Refuse the first of ``params`` that none of its ``constraints`` accept (a parameter
    without constraints is not checked): an InvalidParameter naming it, ``owner`` (the
    estimator's class name), what it accepts and the value given."""
    for name, value in params.items():
        accepted = constraints.get(name)
        if accepted is None or any(_holds(c, value) for c in accepted):
            continue
        # a name outside Options that a plain str also accepts is just "a str"
        said = [_describe(c) for c in accepted if not (isinstance(c, Options) and str in accepted)]
        what = said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"
        raise InvalidParameter(f"The {name!r} parameter of {owner} must be {what}. Got {value!r} instead.")


# ------------------------------------------------------------ the Parameters section ----


@dataclass(frozen=True)
class ParameterDoc:
    """One entry of a numpydoc ``Parameters`` section: ``name : type`` and its description
    (its lines joined into one paragraph)."""

    name: str
    type: str
    description: str


_UNDERLINE = re.compile(r"^-{3,}\s*$")


def parameter_docs(obj) -> dict[str, ParameterDoc]:
    """name -> ParameterDoc of the ``Parameters`` section of ``obj``'s docstring (a class or a
    function): the section is the block under a ``Parameters`` heading underlined with dashes,
    up to the next underlined heading; each entry is a ``name : type`` line at the section's
    indentation followed by its indented description. ``a, b : type`` documents both."""
    lines = inspect.cleandoc(obj.__doc__ or "").splitlines()
    try:
        start = next(
            i + 2
            for i in range(len(lines) - 1)
            if lines[i].strip() == "Parameters" and _UNDERLINE.match(lines[i + 1].strip())
        )
    except StopIteration:
        return {}
    docs: dict[str, ParameterDoc] = {}
    names, type_, body = [], "", []

    def close():
        for name in names:
            docs[name] = ParameterDoc(name, type_, " ".join(" ".join(body).split()))

    for i in range(start, len(lines)):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and _UNDERLINE.match(lines[i + 1].strip()):
            break  # the next section's heading
        if line and not line[0].isspace():
            close()
            head, _, type_ = line.partition(":")
            names, type_, body = [n.strip() for n in head.split(",")], type_.strip(), []
        elif names:
            body.append(line.strip())
    close()
    return docs
