"""The baseline configuration (what a user gets without tuning) and short labels of configurations.

The baseline of a study is, in order:

1. the configuration of rows the sweeper flagged (a boolean column ``is_default_config`` or ``baseline``);
2. else the configuration whose swept knobs and parameters equal the workload's YAML defaults
   (``conf/workload/<workload>.yaml``, with the row's preset applied). A knob that is null in a row (inactive
   under its condition) matches any default. Knobs constant over the study are not compared: they were fixed
   for the whole sweep, not tuned;
3. else none, and the report says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sweeper.report.data import norm, short_name
from sweeper.results.keys import flatten

FLAG_COLUMNS = ("is_default_config", "baseline")
_GENERIC = {"on", "off", "auto", "none", "default", "all", "true", "false", "null", "cpu", "cuda", "math"}


def _conf_dir() -> Path:
    """``conf/`` of a checkout or editable install, else the copy packaged as ``sweeper/conf``."""
    checkout = Path(__file__).resolve().parents[2] / "conf"
    return checkout if (checkout / "workload").is_dir() else Path(__file__).resolve().parents[1] / "conf"


@functools.lru_cache(maxsize=None)
def workload_defaults(workload: str, preset: str | None) -> dict[str, str] | None:
    """``knob.*``/``param.*`` -> normalized default value, from the workload YAML (preset applied); None if the
    workload has no YAML here."""
    path = _conf_dir() / "workload" / f"{workload}.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    knobs = dict(cfg.get("knobs") or {})
    params = {k: v for k, v in (cfg.get("workload") or {}).items() if k not in ("name", "module")}
    over = ((cfg.get("presets") or {}).get(preset) or {}) if preset else {}
    knobs.update(over.get("knobs") or {})
    params.update(over.get("workload") or {})
    flat = {**flatten(knobs, "knob."), **flatten(params, "param.")}
    return {k: norm(v) if not isinstance(v, (list, dict)) else str(v) for k, v in flat.items()}


@dataclass
class Baseline:
    key: str | None  # configuration key, None when there is no baseline
    how: str  # how it was found, or why there is none
    defaults: dict[str, str] | None  # the workload defaults (for labels), None if unknown


def find_baseline(rows: pd.DataFrame, normed: pd.DataFrame, keys: pd.Series, swept: list[str]) -> Baseline:
    """The baseline configuration of one study's rows (all statuses; ``normed``/``keys`` index like rows)."""
    workload = str(rows["workload"].iloc[0])
    preset = str(rows["preset"].iloc[0]) if "preset" in rows and pd.notna(rows["preset"].iloc[0]) else ""
    defaults = workload_defaults(workload, preset or None)
    for col in FLAG_COLUMNS:
        if col in rows:
            flagged = rows[col].astype(object).map(lambda v: v is True or v == 1 or str(v).lower() == "true")
            if flagged.any():
                key = keys[flagged].value_counts().index[0]
                return Baseline(key, f"the configuration the sweeper marked `{col}`", defaults)
    if defaults is None:
        return Baseline(None, f"no baseline: the defaults of workload {workload!r} are unknown here "
                              f"(no conf/workload/{workload}.yaml)", None)
    match = pd.Series(True, index=rows.index)
    for col in swept:
        want = defaults.get(col, "null")
        match &= (normed[col] == want) | (normed[col] == "null")
    if not match.any():
        shown = ", ".join(f"{short_name(c)}={defaults.get(c, 'null')}" for c in swept)
        return Baseline(None, f"no trial ran the workload defaults ({shown}); speed-ups are not shown", defaults)
    key = keys[match].value_counts().index[0]
    return Baseline(key, f"the configuration whose swept knobs equal the defaults of conf/workload/{workload}.yaml"
                         + (f" (preset {preset})" if preset else ""), defaults)


def _token(col: str, value: str) -> str:
    name = short_name(col)
    if value == "true":
        return name
    if value == "false":
        return f"no {name}"
    if col.startswith("knob.") and value.lower() not in _GENERIC and not _numeric(value):
        return value
    return f"{name}={value}"


def _numeric(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def label(values: dict[str, str], swept: list[str], defaults: dict[str, str] | None) -> str:
    """``bf16 + channels_last + compile=default + num_workers=12``: the swept values that differ from the
    defaults (all swept values when the defaults are unknown); ``defaults`` when none differ."""
    tokens = [_token(c, values[c]) for c in swept
              if values.get(c, "null") != "null" and (defaults is None or values[c] != defaults.get(c, "null"))]
    return " + ".join(tokens) if tokens else ("defaults" if defaults is not None else "(one configuration)")
