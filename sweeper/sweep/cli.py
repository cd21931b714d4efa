"""Bad input, caught before Hydra runs anything: one line naming the key and the fix, exit code 2, no traceback.

``preflight`` composes the config the way Hydra will (sweep overrides aside: the sweeper validates those
against the search-space grammar) and turns composition errors into :class:`ConfigError` lines.
Set ``HYDRA_FULL_ERROR=1`` to see Hydra's own message and traceback instead.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.results.keys import suggest_key

_FLAGS_WITH_VALUE = {
    "-cp",
    "--config-path",
    "-cn",
    "--config-name",
    "-cd",
    "--config-dir",
    "--experimental-rerun",
    "-p",
    "--package",
    "--info",
    "-c",
    "--cfg",
}
_SWEEP = re.compile(r"=\s*(choice|range|interval|tag|glob|sort|shuffle)\s*\(|^[^=]*=[^'\"\[{]*,")


def _overrides(argv: list[str], sweeps: bool = False) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _FLAGS_WITH_VALUE:
            skip = arg not in ("--info", "-c", "--cfg")
            continue
        if arg.startswith("-"):
            continue
        if "=" in arg and (sweeps or not _SWEEP.search(arg)):
            out.append(arg)
    return out


def _yaml_error(exc: BaseException) -> ConfigError | None:
    """A YAML file that does not parse: its path and line (PyYAML's marks), found anywhere in the chain."""
    seen = exc
    while seen is not None:
        text = str(seen)
        marks = re.findall(r'in "([^"]+\.ya?ml)", line (\d+), column (\d+)', text)
        if marks:
            path, line, col = marks[-1]  # the last mark is where the parser gave up
            problem = getattr(seen, "problem", None) or text.strip().splitlines()[0]
            context = getattr(seen, "context", None)
            what = f"{context}: {problem}" if context else problem
            return ConfigError(f"{path}:{line}:{col}", f"is not valid YAML ({what})", "fix the YAML at that line")
        seen = seen.__cause__ or seen.__context__
    return None


_TYPED_ITEMS = {"ObjectiveConf": "write each objective as {metric: <name>, direction: maximize|minimize}"}


def _translate(exc: Exception, overrides: list[str], known_keys: list[str]) -> ConfigError:
    yaml_error = _yaml_error(exc)
    if yaml_error is not None:
        return yaml_error
    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    m = re.search(r"Could not find '([^']+)/([^/']+)'", text)  # hydra/launcher/joblb: group hydra/launcher
    if m:
        group, name = m.groups()
        options = (
            re.findall(r"^\s+(\S+)\s*$", text.split("Available options", 1)[-1], re.M)
            if "Available options" in text
            else []
        )
        close = difflib.get_close_matches(name, options, n=1)
        given = next((o.split("=", 1)[0] for o in overrides if o.split("=", 1)[0].lstrip("+~") == group), group)
        hint = f"did you mean {given.lstrip('~')}={close[0]}? " if close else ""
        fix = f"{hint}known: {', '.join(options) or 'none'}"
        if group == "workload":
            fix += "; " + own_config_hint(name)
        return ConfigError(group, f"unknown {group} {name!r}", fix)
    cause = str(getattr(exc, "__cause__", None) or "")
    m = re.search(r"full_key: (hydra\.sweeper\.(?:params|conditions|constraints))\.(\S+)", cause)
    if m and "is not in struct" in cause:
        group, key = m.groups()
        return ConfigError(
            group,
            f"`{group}=` can only replace entries the workload already has, not add `{key}`",
            f"add entries with `++{group}={{...}}`, or sweep a knob directly: {key}='choice(...)'",
        )
    m = re.search(r"Could not override '(hydra\.sweeper\.[^']+)'", text)
    field = re.search(r"Key '([^']+)' not in '(\w+)'", cause)
    if m and field and field.group(2) in _TYPED_ITEMS:  # a key an objective does not have: its fields named
        what = f"{field.group(1)!r} is not a field of {field.group(2)}"
        return ConfigError(m.group(1), what, _TYPED_ITEMS[field.group(2)])
    m = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' is not in struct", text)
    if m:
        key = m.group(1)
        what = "is not a key of this workload's config"
        if key.startswith("hydra."):
            what = "is not a setting of the sweeper" if key.startswith("hydra.sweeper.") else "is not a Hydra setting"
        return ConfigError(key, what, suggest_key(key, known_keys))
    m = re.search(r"Could not append to config\. An item is already at '([^']+)'", text)
    if m:
        return ConfigError(m.group(1), "already exists, so '+' cannot add it", f"drop the '+': {m.group(1)}=...")
    bad = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") in text), None)
    return ConfigError(bad.split("=", 1)[0] if bad else "overrides", first, "fix the override's syntax or value")


def own_config_hint(name: str) -> str:
    """Where Hydra looks for a workload of the user's own: the folder holding ``workload/<name>.yaml``."""
    found = [str(p.parent.parent.relative_to(Path.cwd())) for p in Path.cwd().glob(f"*/workload/{name}.yaml")]
    folder = found[0] if found else "<your conf dir>"
    return (
        f"a workload of your own: add `-cd {folder}` (the folder holding workload/{name}.yaml), or "
        f"`hydra.searchpath=[file://{os.path.abspath(folder) if found else '<your conf dir>'}]`"
    )


def _flag_value(argv: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of ``names`` in ``argv`` (``-cd DIR``, ``--config-dir DIR``, ``--config-dir=DIR``)."""
    value = None
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            value = argv[i + 1]
        elif "=" in arg and arg.split("=", 1)[0] in names:
            value = arg.split("=", 1)[1]
    return value


def user_search_path(argv: list[str]) -> list[str]:
    """The command's own config folders, as Hydra will search them: ``-cd``/``--config-dir`` (a user's project
    keeping ``conf/workload/<name>.yaml``) and ``hydra.searchpath=[...]``. Returned as one ``hydra.searchpath``
    override, so the pre-check composes what Hydra will compose."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    paths: list[str] = []
    config_dir = _flag_value(argv, ("-cd", "--config-dir"))
    if config_dir:
        paths.append(f"file://{os.path.abspath(config_dir)}")
    for arg in argv:
        if arg.lstrip("+").startswith("hydra.searchpath="):
            value = OverridesParser.create().parse_overrides([arg])[0].value()
            paths += [str(p) for p in (value if isinstance(value, list) else [value])]
    if not paths:
        return []
    return ["hydra.searchpath=[" + ",".join(f"'{p}'" for p in paths) + "]"]


def preflight(argv: list[str], conf_dir: str) -> Any:
    """Exit 2 with one line if the command's overrides cannot compose into a config; else the config Hydra will
    compose (with its ``hydra`` node; None when not checked)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or any(a in ("-h", "--help", "--hydra-help") for a in argv):
        return None
    _check_syntax(_overrides(argv, sweeps=True))
    overrides = [o for o in _overrides(argv) if not o.lstrip("+").startswith("hydra.searchpath=")]
    overrides += user_search_path(argv)
    import copy

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            with_hydra = compose("config", overrides=overrides, return_hydra_config=True)
            cfg = copy.deepcopy(with_hydra)  # what compose() returns without the hydra node (composed once)
            with open_dict(cfg):
                del cfg["hydra"]
            if not any(o.lstrip("+").startswith("workload=") for o in overrides) and "workload" not in cfg:
                from workloads import available

                raise ConfigError(
                    "workload",
                    "no workload selected",
                    f"add +workload=<name>; known workloads: {', '.join(available())}",
                )
            _check_sweeper_keys(with_hydra)
            multirun = any(a in ("-m", "--multirun") for a in argv)
            _check_values(cfg, overrides, None if multirun else with_hydra.hydra.sweeper.get("params"))
            if multirun:
                _check_study_name(with_hydra)
            return with_hydra
    except ConfigError as e:
        fail(e)
    except Exception as e:  # noqa: BLE001 - every composition error becomes one line
        fail(_translate(e, overrides, _keys_without_bad(conf_dir, overrides)))
    finally:
        GlobalHydra.instance().clear()


def _check_sweeper_keys(cfg: Any) -> None:
    """Every ``hydra.sweeper`` key is a setting of the knob sweeper: ``+hydra.sweeper.timeout=60`` adds a key that
    composes, and Hydra would then stop with its own multi-line error when it builds the sweeper."""
    import dataclasses

    from omegaconf import OmegaConf

    from sweeper.results.keys import flatten
    from sweeper.sweep.config.settings import KnobSweeperConf, PrunerConf

    sweeper = OmegaConf.to_container(cfg.hydra.sweeper, resolve=False)
    if sweeper.get("_target_") != KnobSweeperConf._target_:
        return  # another sweeper: its own keys
    known = {f.name for f in dataclasses.fields(KnobSweeperConf)}
    pruner = {f"pruner.{f.name}" for f in dataclasses.fields(PrunerConf)}
    given = [k for k in sweeper if k not in known] + [
        k for k in flatten({"pruner": sweeper.get("pruner") or {}}) if k not in pruner
    ]
    for i, objective in enumerate(sweeper.get("objectives") or []):  # ObjectiveConf.metric has no default
        if isinstance(objective, dict) and objective.get("metric") in (None, "???"):
            raise ConfigError(f"hydra.sweeper.objectives[{i}].metric", "is missing", _TYPED_ITEMS["ObjectiveConf"])
    if given:
        full = [f"hydra.sweeper.{k}" for k in sorted(known | pruner)]
        key = f"hydra.sweeper.{given[0]}"
        raise ConfigError(key, "is not a setting of the sweeper", suggest_key(key, full))


MAX_STUDY_NAME = 512  # characters: Optuna's database storages keep a study name in a column of this length


def _check_study_name(cfg: object) -> None:
    """A study name a database storage can hold (PostgreSQL refuses a longer one with a traceback)."""
    from omegaconf import OmegaConf

    name = OmegaConf.select(cfg, "hydra.sweeper.study_name", throw_on_resolution_failure=False)
    storage = str(OmegaConf.select(cfg, "hydra.sweeper.storage", throw_on_resolution_failure=False) or "sqlite")
    if name is not None and len(str(name)) > MAX_STUDY_NAME and not storage.startswith("journal"):
        raise ConfigError(
            "hydra.sweeper.study_name",
            f"has {len(str(name))} characters, more than the {MAX_STUDY_NAME} an Optuna database storage holds",
            f"give a name of at most {MAX_STUDY_NAME} characters",
        )


def _check_syntax(overrides: list[str]) -> None:
    """Every override parses in Hydra's grammar (an empty or unclosed ``choice(``): one line, not Hydra's three."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except Exception as e:  # noqa: BLE001 - Hydra's parse errors have several types
            key, _, value = override.partition("=")
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.startswith(("See ", "Error "))]
            why = (lines[0] if lines else type(e).__name__).replace("ValueError while evaluating ", "")
            fail(
                ConfigError(
                    key.lstrip("+~"),
                    f"cannot parse {value!r} ({why})",
                    "write a value, or choice(a, b), range(start, stop, step), interval(a, b)",
                )
            )


def _check_values(cfg: object, overrides: list[str], space: object = None) -> None:
    """Every value the command gives a knob, distributed knob or workload parameter has the type the workload
    declares (compared with the config composed without those values; for a single run, also with the
    workload's search space ``space``: a sweep checks it when it builds the space); numeric settings are in range;
    the results folder can be written. Bad values never reach a trial, a row or a report."""
    from hydra import compose
    from omegaconf import OmegaConf

    from sweeper.results.keys import flatten
    from sweeper.sweep.config.trial_config import (
        check_against_space,
        check_enumerations,
        check_results_dir,
        check_settings,
        check_values,
    )

    full = OmegaConf.to_container(cfg, resolve=False)
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    flat = flatten({k: full.get(k) or {} for k in ("knobs", "distributed", "workload")})
    for key in sorted(k for k in given if k in flat and flat[k] == ""):
        raise ConfigError(key, "is empty", f"give a value ({key}=<value>), or null to turn it off")
    values = {k: v for k, v in flat.items() if k in given}
    if values:  # their declared types: the config composed without the command's values (one more composition)
        base_overrides = [o for o in overrides if "." not in o.split("=", 1)[0] or o.lstrip("+~").startswith("hydra.")]
        base = OmegaConf.to_container(compose("config", overrides=base_overrides), resolve=False)
        check_values(values, flatten({k: v for k, v in base.items() if k in ("knobs", "distributed", "workload")}))
    wl = full.get("workload") or {}
    check_enumerations(values, str(wl.get("name")), wl.get("module"))
    if space is not None:
        params = OmegaConf.to_container(space, resolve=False) if OmegaConf.is_config(space) else dict(space)
        check_against_space(values, params, str(wl.get("name")), wl.get("module"))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    check_settings(resolved)
    check_results_dir(str(resolved.get("results_dir") or "results"))


def _keys_without_bad(conf_dir: str, overrides: list[str]) -> list[str]:
    """Dotted keys of the config composed from the group selections alone (to suggest a fix for a typo)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from sweeper.results.keys import flatten

    groups = [o for o in overrides if o.lstrip("+").split("=", 1)[0] in ("workload", "hydra.searchpath")]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            cfg = compose("config", overrides=groups, return_hydra_config=True)
            plain = OmegaConf.to_container(cfg, resolve=False)
            hydra = {k: v for k, v in plain.pop("hydra", {}).items() if k not in ("runtime", "overrides")}
            return list(flatten({**plain, "hydra": hydra}))  # the sweeper's settings, the launcher's, Hydra's
    except Exception:  # noqa: BLE001 - only for a suggestion
        return []
    finally:
        GlobalHydra.instance().clear()


def show_job(argv: list[str], conf_dir: str) -> None:
    """``--cfg job`` (``-c job``): print what a trial of this command runs on, then exit 0.

    Hydra's own ``--cfg job`` shows the composed YAML before the preset is applied and without the search space
    (it lives under ``hydra.sweeper``). This prints the trial's config with the device resolved and the preset's
    values in place, then the search space the sweep samples (the workload's, the preset's, the command's) with
    its conditions and constraints. ``--cfg hydra`` / ``--cfg all`` are Hydra's, unchanged.
    """
    if _flag_value(argv, ("-c", "--cfg")) != "job" or os.environ.get("HYDRA_FULL_ERROR") == "1":
        return
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from sweeper.sweep.config.trial_config import as_dict as plain
    from sweeper.sweep.config.trial_config import preset_params, trial_config
    from sweeper.sweep.run.launch import command_line_params
    from sweeper.trial import gpu

    args = [a for a in argv if "=" in a and not a.startswith("-")]
    parsed = OverridesParser.create().parse_overrides(args)
    plain_args = [
        o.input_line
        for o in parsed
        if not o.is_sweep_override() and not o.input_line.lstrip("+").startswith("hydra.searchpath=")
    ] + user_search_path(argv)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            composed = compose("config", overrides=plain_args, return_hydra_config=True)
        cfg = trial_config(plain(composed), gpu.device_info(), plain_args)
    except ConfigError as e:
        fail(e)
    finally:
        GlobalHydra.instance().clear()
    sweeper_conf = OmegaConf.to_container(composed.hydra.sweeper, resolve=False)
    params = dict(sweeper_conf.get("params") or {})
    params.update(preset_params(cfg))
    params.update(command_line_params([a for a in args if a.startswith("hydra.sweeper.params")]))
    params.update(
        {o.get_key_element().lstrip("+~"): o.input_line.split("=", 1)[1] for o in parsed if o.is_sweep_override()}
    )
    shown = {k: v for k, v in cfg.items() if k not in ("presets", "env")}
    print(f"# the config a trial runs on (device {cfg['device']}, preset {cfg['preset'] or 'none'} applied)")
    print(OmegaConf.to_yaml(shown), end="")
    print("# the search space of `-m` (hydra.sweeper.params, after the preset and the command line)")
    space = {
        "params": params,
        "conditions": sweeper_conf.get("conditions") or {},
        "constraints": sweeper_conf.get("constraints") or [],
    }
    print(OmegaConf.to_yaml({"search_space": space}), end="")
    raise SystemExit(0)


def fail(err: ConfigError) -> None:
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2)
