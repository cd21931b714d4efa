"""Typed knob classes: one frozen dataclass per workload, a field per knob, its type (``Literal`` choices for a
string knob) and its default.

A knob class is read three ways: :func:`problems` checks values the user or a sweep gives (once, before launch),
:func:`choices` lists a field's ``Literal`` values (the space's ``choice(...)`` must stay within them), and
:func:`of` turns a trial's ``knobs`` dict into an instance, a missing or null knob taking the field's default.
Null is always a valid value: it turns a knob off (or leaves it inactive under a sweep's condition).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

T = TypeVar("T")

_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _alternatives(hint: Any) -> tuple[Any, ...]:
    """The members of a union (``X | None`` -> ``(X,)``); a non-union hint alone."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return (hint,)


def choices(cls: type) -> dict[str, tuple[Any, ...]]:
    """Field -> its ``Literal`` values, for every field whose type names some."""
    out = {}
    for name, hint in _hints(cls).items():
        values = [v for alt in _alternatives(hint) if typing.get_origin(alt) is Literal for v in typing.get_args(alt)]
        if values:
            out[name] = tuple(values)
    return out


def defaults(cls: type) -> dict[str, Any]:
    """Field -> its default."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _accepts(alt: Any, value: Any) -> bool:
    if typing.get_origin(alt) is Literal:
        return any(value == v and type(value) is type(v) for v in typing.get_args(alt))
    if alt is bool:
        return isinstance(value, bool)
    if alt is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if alt is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if alt is str:
        return isinstance(value, str)
    return True  # a type this check does not model: the workload decides


def allowed(cls: type, name: str) -> str:
    """What field ``name`` takes, in words: ``fp32, tf32, fp16, bf16`` or ``off, all or an integer``."""
    words = []
    for alt in _alternatives(_hints(cls)[name]):
        if typing.get_origin(alt) is Literal:
            words += [str(v) for v in typing.get_args(alt)]
        else:
            words.append(_TYPE_NAMES.get(alt, getattr(alt, "__name__", str(alt))))
    if len(words) == len(choices(cls).get(name, ())):
        return ", ".join(words)
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]


def problem(cls: type, name: str, value: Any) -> str | None:
    """Why ``value`` is not a value of field ``name`` (one of its choices, or of its type), or None.

    Unknown fields and null are never a problem here (null turns a knob off; a workload may read extra knobs)."""
    hint = _hints(cls).get(name)
    if hint is None or value is None:
        return None
    if any(_accepts(alt, value) for alt in _alternatives(hint)):
        return None
    return f"use one of: {allowed(cls, name)}" if name in choices(cls) else f"give {allowed(cls, name)}"


def problems(cls: type, values: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(field, value, fix) for every value in ``values`` (field -> a value, or a list of a sweep's choices) that
    the field does not take."""
    out = []
    for name, given in values.items():
        for value in given if isinstance(given, (list, tuple)) else [given]:
            fix = problem(cls, name, value)
            if fix:
                out.append((name, value, fix))
    return out


def of(cls: type[T], knobs: Mapping[str, Any] | None) -> T:
    """``knobs`` as an instance of ``cls``: missing or null knobs take the field's default, others are ignored."""
    given = knobs or {}
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in given.items() if k in names and v is not None})


def field_problems(obj: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, problem, fix) for each field of the dataclass ``obj`` (nested dataclasses too) whose value its type
    does not take: a ``Literal`` field one of its choices, null only where the type is optional. Unlike
    :func:`problem` for knobs, null is a problem where the field's type does not allow it."""
    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += field_problems(value, f"{prefix}{f.name}.")
            continue
        hint = _hints(type(obj))[f.name]
        alternatives = _alternatives(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)
        if value is None and optional or value is not None and problem(type(obj), f.name, value) is None:
            continue
        if all(typing.get_origin(alt) is Literal for alt in alternatives):  # a choice: the words of the choices
            values = (None, *choices(type(obj))[f.name]) if optional else choices(type(obj))[f.name]
            words = ", ".join("null" if v is None else str(v) for v in values)
            out.append((prefix + f.name, f"must be one of {values}, got {value!r}", f"use one of: {words}"))
        else:
            what = allowed(type(obj), f.name) + (" or null" if optional else "")
            out.append((prefix + f.name, f"{value!r} is not {what}", f"give {what}"))
    return out
