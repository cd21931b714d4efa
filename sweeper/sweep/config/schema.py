"""The typed config schemas, registered in Hydra's ConfigStore and checked once before any trial starts.

``measure`` and ``trial`` (:mod:`sweeper.trial.conf`) and ``distributed``
(:class:`workloads.spec.distributed.DistributedConf`) are stored as ``schema/<node>`` (their OmegaConf twins:
``Literal`` choices erased, ``sweeper.sweep.config.structured``); their defaults, which ``conf/config.yaml``
composes, are registered by the plugin (``hydra_plugins.knob_sweeper``) as ``<node>_defaults``. :func:`validate`
checks a trial config's nodes against them: an unknown key, a value of the wrong type or out of range is a
:class:`ConfigError` (one line naming the key and the fix, exit 2), raised by the sweep before its first trial and
by a single run before it starts. The config itself is left as
composed (a row records the values as the YAML wrote them).
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from sweeper.errors import ConfigError
from sweeper.sweep.config.structured import build, omegaconf_schema
from sweeper.trial.conf import NODES
from workloads.spec import typed as typed_fields

SCHEMAS: dict[str, type] = NODES

for _name, _schema in SCHEMAS.items():
    ConfigStore.instance().store(group="schema", name=_name, node=omegaconf_schema(_schema), provider="knob_sweeper")


def validate(cfg: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` for the first bad key of ``cfg``'s ``measure``, ``trial`` and ``distributed``."""
    for node, schema in SCHEMAS.items():
        if cfg.get(node) is not None:
            check(node, schema, cfg[node])


def check(node: str, schema: type, value: Any) -> Any:
    """``value`` (the config node ``node``) as an instance of ``schema``, or a :class:`ConfigError`."""
    if not isinstance(value, dict):
        raise ConfigError(node, f"must be a mapping, got {value!r}", f"write it as {node}: {{key: value, ...}}")
    typed = OmegaConf.structured(omegaconf_schema(schema))
    OmegaConf.set_readonly(typed, False)  # frozen dataclasses make a read-only node
    try:
        merged = OmegaConf.merge(typed, value)
    except ConfigKeyError as e:
        key = str(e.full_key)
        known = [f for f in schema.__dataclass_fields__]
        close = difflib.get_close_matches(key.split(".")[-1], known, n=1)
        hint = f"did you mean `{node}.{close[0]}`? " if close else ""
        raise ConfigError(f"{node}.{key}", f"is not a {node} setting", f"{hint}known: {', '.join(known)}") from None
    except ValidationError as e:
        key = str(e.full_key)
        raise ConfigError(
            f"{node}.{key}",
            f"{_value_at(value, key)!r} is not {_type_name(schema, key)}",
            f"give {_type_name(schema, key)}",
        ) from None
    except OmegaConfBaseException as e:
        raise ConfigError(node, str(e).splitlines()[0], f"fix the {node} node") from None
    obj = build(schema, OmegaConf.to_container(merged))
    for key, problem, fix in [*typed_fields.field_problems(obj), *obj.problems()]:
        raise ConfigError(f"{node}.{key}", problem, fix)
    return obj


def _value_at(value: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _type_name(schema: type, dotted: str) -> str:
    """``an integer``, ``a number or null``, ... for the field ``dotted`` of ``schema``."""
    hint: Any = schema
    for part in dotted.split("."):
        hint = typing.get_type_hints(hint).get(part, Any) if isinstance(hint, type) else Any
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if typing.get_origin(base) is typing.Literal:  # a choice: its values
        return "one of " + ", ".join(map(str, typing.get_args(base))) + (" or null" if optional else "")
    return names.get(base, "a value of the right type") + (" or null" if optional else "")
