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
        raise ConfigError("preset", f"{name!r} is not a preset of workload {composed['workload']['name']!r}",
                          f"use auto, none or one of: {known}")
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
        if (override.is_delete() or override.is_sweep_override() or "." not in key  # "+workload=x" is a group
                or key.split(".", 1)[0] not in _MERGED_BY_PRESET):
            continue
        set_dotted(cfg, key, override.value())


def trial_config(composed: dict[str, Any], info: DeviceInfo, overrides: list[str] = ()) -> dict[str, Any]:
    """The composed config (plain dict, no ``hydra`` node) with device and preset resolved and applied.

    ``overrides`` are the command line's (or the sweeper's) overrides: they win over the preset."""
    if "workload" not in composed or not isinstance(composed.get("workload"), dict) or "name" not in composed["workload"]:
        from workloads import available

        raise ConfigError("workload", "no workload selected",
                          f"add +workload=<name> to the command; known workloads: {', '.join(available())}")
    cfg = copy.deepcopy(composed)
    cfg["device"] = resolve_device(cfg.get("device", "auto"), info)
    preset = resolve_preset(cfg, "cuda" if cfg["device"].startswith("cuda") else "cpu")
    cfg["preset"] = preset
    if preset:
        for name in _chain(cfg, preset):
            over = cfg["presets"][name]
            for key in _MERGED_BY_PRESET:
                if key in over:
                    cfg[key] = _merge(cfg.get(key) or {}, over[key])
        _reapply(cfg, overrides)
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
    """``workloads.load`` for a trial config's ``workload`` node; a module that cannot be found is bad input."""
    import workloads

    try:
        return workloads.load(wl["name"], wl.get("module"))
    except KeyError as e:
        raise ConfigError("workload.module" if wl.get("module") else "workload", str(e.args[0]),
                          "see the README's 'Your own model'") from None


plain = as_dict  # the name bench/gpu_validate.py imports (renamed: `plain` also named the dict itself)
