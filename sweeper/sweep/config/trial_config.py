"""From the composed Hydra config to the plain dict a trial runs on: preset applied, device resolved.

Used by both the sweeper (to build the search space against the right defaults) and the task (to run the
trial), so the two can never disagree about what a configuration means.
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import ModuleType
from typing import Any

from sweeper.errors import ConfigError
from sweeper.results.keys import set_dotted
from sweeper.sweep.config.structured import defaults
from sweeper.trial.conf import NODES
from workloads.base import DeviceInfo

_MERGED_BY_PRESET = ("workload", "knobs", "measure", "trial")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def resolve_device(requested: str, info: DeviceInfo) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; an explicit value is kept (and checked)."""
    if requested in (None, "", "auto", "cuda"):
        if requested == "cuda" and info.kind != "cuda":
            raise ConfigError("device", "is 'cuda' but no GPU is visible", "use device=cpu or device=auto")
        return "cuda:0" if info.kind == "cuda" else "cpu"  # the first GPU the trial sees (CUDA_VISIBLE_DEVICES)
    if str(requested).startswith("cuda") and info.kind != "cuda":
        raise ConfigError("device", f"is {requested!r} but no GPU is visible", "use device=cpu or device=auto")
    if not (str(requested) == "cpu" or str(requested).startswith("cuda")):
        raise ConfigError("device", f"{requested!r} is not a device", "use auto, cpu, cuda or cuda:N")
    return str(requested)


def resolve_preset(composed: dict[str, Any], device: str) -> str | None:
    """``preset: auto`` picks ``tiny`` on the CPU (when the workload has one) and none on a GPU."""
    presets = composed.get("presets") or {}
    name = composed.get("preset")
    if name in (None, "", "none"):
        return None
    if name == "auto":
        return "tiny" if device == "cpu" and "tiny" in presets else None
    if name not in presets:
        known = ", ".join(sorted(presets)) or "none"
        raise ConfigError(
            "preset",
            f"{name!r} is not a preset of workload {composed['workload']['name']!r}",
            f"use auto, none or one of: {known}",
        )
    return str(name)


def _chain(cfg: dict[str, Any], preset: str) -> list[str]:
    """The presets to apply, in order: a preset's ``base`` first (``auto``: tiny on the CPU, none on a GPU), so
    ``preset=nightly`` measures the CPU's tiny sizes for long enough to gate."""
    base = (cfg["presets"][preset] or {}).get("base")
    if not base:
        return [preset]
    first = resolve_preset({**cfg, "preset": base}, "cuda" if cfg["device"].startswith("cuda") else "cpu")
    if first in (None, preset):
        return [preset]
    return [*_chain(cfg, first), preset]


def _reapply(cfg: dict[str, Any], overrides: list[str]) -> None:
    """Set again the values the command line (or the sweeper) gave for keys a preset may have replaced:
    a preset changes the workload's defaults, never what the user or the sampler asked for."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group.lstrip("+~")
        if (
            override.is_delete()
            or override.is_sweep_override()
            or "." not in key  # "+workload=x" is a group
            or key.split(".", 1)[0] not in _MERGED_BY_PRESET
        ):
            continue
        set_dotted(cfg, key, override.value())


def trial_config(composed: dict[str, Any], info: DeviceInfo, overrides: list[str] = ()) -> dict[str, Any]:
    """The composed config (plain dict, no ``hydra`` node) with device and preset resolved and applied, and every
    key of the typed nodes (``measure``, ``trial``, ``distributed``) present, missing ones at their dataclass's default.

    ``overrides`` are the command line's (or the sweeper's) overrides: they win over the preset."""
    if (
        "workload" not in composed
        or not isinstance(composed.get("workload"), dict)
        or "name" not in composed["workload"]
    ):
        from workloads import available

        raise ConfigError(
            "workload",
            "no workload selected",
            f"add +workload=<name> to the command; known workloads: {', '.join(available())}",
        )
    cfg = copy.deepcopy(composed)
    cfg["device"] = resolve_device(cfg.get("device"), info)  # missing or null: auto
    preset = resolve_preset(cfg, "cuda" if cfg["device"].startswith("cuda") else "cpu")
    cfg["preset"] = preset
    if preset:
        for name in _chain(cfg, preset):
            over = cfg["presets"][name]
            for key in _MERGED_BY_PRESET:
                if key in over:
                    cfg[key] = _merge(cfg.get(key) or {}, over[key])
        _reapply(cfg, overrides)
    for node, schema in NODES.items():  # every key present: code reads cfg["trial"]["isolate"], no default of its own
        if cfg.get(node) is None or isinstance(cfg[node], dict):  # anything else: validate() says what is wrong
            cfg[node] = _merge(defaults(schema), cfg.get(node) or {})
    env = dict(cfg.get("env") or {})
    cache = cfg.get("compile_cache_dir")
    if cache:
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cache).resolve()))
    if cfg.get("gpus"):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in cfg["gpus"])
    cfg["env"] = env
    return cfg


def preset_params(cfg: dict[str, Any]) -> dict[str, Any]:
    """Search-space entries the active preset replaces (``presets.<name>.params``)."""
    preset = cfg.get("preset")
    if not preset:
        return {}
    out: dict[str, Any] = {}
    for name in _chain(cfg, preset) if "device" in cfg else [preset]:
        out.update(((cfg.get("presets") or {}).get(name) or {}).get("params") or {})
    return out


def as_dict(cfg: Any) -> dict[str, Any]:
    """The composed config as plain Python, interpolations resolved, without the ``hydra`` node."""
    from omegaconf import Container, OmegaConf

    out: dict[str, Any] = {}
    for key in cfg:
        if key == "hydra":
            continue
        node = cfg[key]
        out[key] = OmegaConf.to_container(node, resolve=True) if isinstance(node, Container) else node
    return out


def load_workload(wl: dict[str, Any]) -> ModuleType:
    """``workloads.load_spec`` for a trial config's ``workload`` node: the module that holds the workload's
    ``check``, ``METRICS`` and ``Knobs`` (torch-free for a built-in workload); one that cannot be found is bad
    input."""
    import workloads

    key = "workload.module" if wl.get("module") else "workload"
    try:
        return workloads.load_spec(wl["name"], wl.get("module"))
    except KeyError as e:
        raise ConfigError(key, str(e.args[0]), getattr(e, "fix", "see the README's 'Your own model'")) from None


# ---------------------------------------------------------------------------------------------------- validation

_TYPED_SECTIONS = ("knobs.", "distributed.", "workload.")


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string"}.get(type(value), type(value).__name__)


def check_value(key: str, value: Any, declared: Any) -> None:
    """A one-line error unless ``value`` has the type of the workload's declared ``declared`` value: a bool knob
    takes true/false (not yes/1), an int knob an integer, a float knob a number. Null is always allowed (it turns a
    knob off); a null-declared knob takes any plain value."""
    if value is None or declared is None or isinstance(declared, (list, dict)):
        return
    if isinstance(declared, bool):
        ok = isinstance(value, bool)
    elif isinstance(declared, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(declared, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    if not ok:
        example = {"bool": "true or false", "int": "an integer", "float": "a number"}.get(
            _type_name(declared), "a string"
        )
        raise ConfigError(
            key,
            f"{value!r} is {_article(value)} but the workload declares {_article(declared)} (default {declared!r})",
            f"give {example}, e.g. {key}={_example(declared)}",
        )


def _article(declared: Any) -> str:
    name = _type_name(declared)
    return f"an {name}" if name == "int" else f"a {name}"


def _example(declared: Any) -> str:
    if isinstance(declared, bool):
        return "true" if declared else "false"
    return str(declared)


def check_values(given: dict[str, Any], declared: dict[str, Any]) -> None:
    """``check_value`` for every knob, distributed knob and workload parameter (flat dotted keys)."""
    for key, value in given.items():
        if key.startswith(_TYPED_SECTIONS) and key in declared:
            check_value(key, value, declared[key])


def check_settings(cfg: dict[str, Any]) -> None:
    """``measure.rel_precision`` and ``trial.resources`` (the typed schemas, ``sweeper.sweep.config.schema``, check the
    other measure and trial settings): one line per broken rule."""
    from sweeper.results.keys import flatten

    flat = flatten({k: cfg.get(k) or {} for k in ("measure", "trial")})  # types and ranges: config/schema.py
    rel = flat.get("measure.rel_precision")
    if rel is not None and (isinstance(rel, bool) or not isinstance(rel, (int, float)) or not 0 < rel < 1):
        raise ConfigError(
            "measure.rel_precision",
            f"must be a fraction in (0, 1), got {rel!r}",
            "e.g. measure.rel_precision=0.01, or null",
        )
    resources = (cfg.get("trial") or {}).get("resources") or {}
    for name in ("gpus", "cpus"):
        value = resources.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(
                f"trial.resources.{name}",
                f"must be a whole number >= 1 or null, got {value!r}",
                f"give what one trial needs, e.g. trial.resources.{name}=1, or null for the whole node",
            )


def check_results_dir(path: str | Path) -> None:
    """The results folder can be created and written (not a file, not read-only)."""
    import os

    p = Path(path)
    existing = next((q for q in (p, *p.parents) if q.exists()), None)
    if p.exists() and not p.is_dir():
        raise ConfigError("results_dir", f"{str(p)!r} is a file", "give a folder, e.g. results_dir=results")
    if existing is not None and existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            "results_dir",
            f"{str(existing)!r} is not writable",
            "give a folder you can write, e.g. results_dir=$HOME/results",
        )
    if existing is not None and not existing.is_dir():
        raise ConfigError(
            "results_dir",
            f"{str(existing)!r} is a file, so {str(p)!r} cannot be a folder",
            "give a folder, e.g. results_dir=results",
        )


def knob_class(module: ModuleType) -> type | None:
    """The knob class of a workload's spec module: its ``Knobs``; for a user's module without one that uses the
    package's helpers (``workloads.common``), :class:`workloads.spec.training.TrainingKnobs` (those knobs then
    mean what the helpers accept); else None."""
    declared = getattr(module, "Knobs", None)
    if declared is not None:
        return declared
    uses_helpers = any(
        getattr(v, "__name__", None) == "workloads.common" or getattr(v, "__module__", None) == "workloads.common"
        for v in vars(module).values()
    )
    if uses_helpers:
        from workloads.spec.training import TrainingKnobs

        return TrainingKnobs
    return None


def check_enumerations(values: dict[str, Any], workload: str, module: str | None = None) -> None:
    """Knobs take only the values the workload's knob class (a dataclass, :func:`knob_class`) declares: a
    ``Literal`` field one of its choices, an ``int`` field an integer, ...: ``knobs.dtype=fp64`` is bad input
    before launch, not a failed trial. ``values``: dotted keys -> a value, or a list of values (a sweep's
    choices). A workload without a knob class is not checked here (``check_values`` compares with its YAML)."""
    from workloads.spec import typed

    declared = knob_class(load_workload({"name": workload, "module": module}))
    if declared is None:
        return
    given = {key[len("knobs.") :]: value for key, value in values.items() if key.startswith("knobs.")}
    for name, value, fix in typed.problems(declared, given):
        raise ConfigError(f"knobs.{name}", f"{value!r} is not a value workload {workload!r} can run", fix)


_KINDS = {bool: "bool", int: "number", float: "number", str: "string"}
_KIND_WORDS = {"bool": "true or false", "number": "numbers", "string": "strings"}


def check_against_space(values: dict[str, Any], params: dict[str, Any], workload: str, module: str | None) -> None:
    """A single run's values against the workload's own search space (``hydra.sweeper.params``, dotted key -> its
    grammar): a value of another kind (number, string, bool) than every value the space gives its key, such as
    ``knobs.label=3.0`` where the space chooses among words, is the clash a sweep reports before launch
    (``sweeper.sweep.config.space``). A knob the workload's knob class declares is left to it (``check_enumerations``:
    ``activation_checkpointing`` takes ``off``, ``all`` or a number of blocks)."""
    from sweeper.sweep.config.space import parse_param
    from workloads.spec import typed

    declared = knob_class(load_workload({"name": workload, "module": module}))
    fields = {f"knobs.{name}" for name in typed.defaults(declared)} if declared is not None else set()
    for key, value in values.items():
        kind = _KINDS.get(type(value))
        if key not in params or key in fields or kind is None:
            continue
        try:
            parsed = parse_param(key, params[key])
        except ConfigError:
            continue  # a space that does not parse stops a sweep; a single run does not use it
        space = list(
            getattr(parsed, "choices", None) or [getattr(parsed, "low", parsed), getattr(parsed, "high", parsed)]
        )
        kinds = {_KINDS.get(type(v)) for v in space}
        if kind in kinds or len(kinds) != 1 or None in kinds:
            continue  # a mixed space (off, all or a number): the workload takes several kinds
        (other,) = kinds
        shown = ", ".join(repr(v) for v in dict.fromkeys(space[:6])) + (", ..." if len(space) > 6 else "")
        fix = (
            f"give one of them, or quote a value meant as a string: {key}=\"'{_example(value)}'\""
            if other == "string"
            else f"give {_KIND_WORDS[other]}, e.g. {key}={_example(space[0])}"
        )
        raise ConfigError(
            key,
            f"{value!r} is {_article(value)} but the workload's search space gives it {_KIND_WORDS[other]} ({shown})",
            fix,
        )


plain = as_dict  # the name bench/gpu_validate.py imports (renamed: `plain` also named the dict itself)


def with_values(cfg: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of the trial config ``cfg`` with dotted keys (``knobs.batch_size``) set to ``values``."""
    out = copy.deepcopy(cfg)
    for key, value in values.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
