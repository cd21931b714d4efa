"""Typed config dataclasses in OmegaConf and Hydra: the ``Literal`` choices stay in the dataclass.

OmegaConf (2.3) takes no ``Literal`` annotation. :func:`omegaconf_schema` gives the twin of a dataclass it can hold:
each ``Literal`` erased to the type of its values (``Literal["a", "b"]`` -> ``str``; ``int | Literal["auto"]`` ->
``Any``), nested dataclasses twinned too, every default the dataclass's own. Hydra composes against the twin (types
checked, keys known); :func:`build` turns the plain result into the dataclass itself, whose choices
``workloads.spec.typed.field_problems`` then checks. Imports nothing heavy: plugin discovery reads it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, List, Literal, Optional, TypeVar

T = TypeVar("T")


def _erase(hint: Any) -> Any:
    """``hint`` as OmegaConf takes it."""
    if dataclasses.is_dataclass(hint):
        return omegaconf_schema(hint)
    origin = typing.get_origin(hint)
    if origin is Literal:
        kinds = {type(v) for v in typing.get_args(hint)}
        return kinds.pop() if len(kinds) == 1 else Any
    if origin is list and dataclasses.is_dataclass(typing.get_args(hint)[0]):
        return List[omegaconf_schema(typing.get_args(hint)[0])]  # noqa: UP006 - what OmegaConf reads
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        erased = {_erase(a) for a in args if a is not type(None)}
        if len(erased) != 1 or Any in erased:
            return Any
        (base,) = erased
        return Optional[base] if type(None) in args else base  # typing.Optional: what OmegaConf reads
    return hint


@functools.cache
def omegaconf_schema(cls: type) -> type:
    """The twin of the dataclass ``cls`` that OmegaConf (and Hydra's ConfigStore) can hold: same name, fields and
    defaults, ``Literal`` choices erased."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            spec = dataclasses.field(default_factory=omegaconf_schema(hint))
        elif f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(default_factory=functools.partial(_plain_default, f.default_factory))
        else:
            spec = dataclasses.field(default=f.default)
        fields.append((f.name, _erase(hint), spec))
    twin = dataclasses.make_dataclass(cls.__name__, fields)
    twin.__doc__, twin.__module__ = cls.__doc__, cls.__module__
    return twin


def _plain_default(factory: Any) -> Any:
    """A default made by ``factory``, each dataclass instance in a list of them as its twin's (OmegaConf takes no
    other in a list typed by the twin)."""
    value = factory()
    if not isinstance(value, list):
        return value
    return [
        build(omegaconf_schema(type(v)), dataclasses.asdict(v)) if dataclasses.is_dataclass(v) else v for v in value
    ]


def _built(hint: Any, value: Any) -> Any:
    """``value`` of a field typed ``hint``: a mapping for a dataclass built into it, a list of them each."""
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return build(hint, value)
    item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
    if isinstance(value, list) and dataclasses.is_dataclass(item):
        return [_built(item, v) for v in value]
    return value


def build(cls: type[T], data: Mapping[str, Any]) -> T:
    """A plain mapping of ``cls``'s fields (a node typed by its twin, as a container) -> an instance of ``cls``,
    nested dataclasses built too; a missing field takes its default."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _built(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data})


def defaults(cls: type) -> dict[str, Any]:
    """Every field of the dataclass ``cls`` and its default, nested dataclasses as mappings."""
    return dataclasses.asdict(cls())
