"""The baseline configuration (what a user gets without tuning) and short labels of configurations.

Everything comes from the rows (the report reads only Parquet, so results copied from another machine, or kept
while a workload's YAML changes, keep their meaning). The baseline of a study is, in order:

1. the configuration of rows the sweeper flagged (a boolean column ``is_default_config`` or ``baseline``);
2. else the configuration whose swept knobs and parameters equal the workload defaults the rows record
   (``knob_defaults``, written by the sweeper from the workload's YAML with the preset applied). A knob that is
   null in a row (inactive under its condition) matches any default. Knobs constant over the study are not
   compared: they were fixed for the whole sweep, not tuned;
3. else none, and the report says so.

Labels name what differs from the defaults: the recorded ones, else the flagged baseline configuration's values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from sweeper.report.data import norm, short_name

FLAG_COLUMNS = ("is_default_config", "baseline")
DEFAULTS_COLUMN = "knob_defaults"
_GENERIC = {"on", "off", "auto", "none", "default", "all", "true", "false", "null", "cpu", "cuda", "math"}


def recorded_defaults(rows: pd.DataFrame) -> dict[str, str] | None:
    """``knob.*``/``param.*`` -> normalized default value, as the rows record them (the most frequent record when
    a study's sweeps recorded different ones); None for rows written without them."""
    if DEFAULTS_COLUMN not in rows:
        return None
    records = rows[DEFAULTS_COLUMN].dropna()
    records = records[records.astype(str) != ""]
    if records.empty:
        return None
    flat = json.loads(records.value_counts().index[0])
    return {k: norm(v) if not isinstance(v, (list, dict)) else str(v) for k, v in flat.items()} or None


def _flagged(rows: pd.DataFrame) -> tuple[str, pd.Series] | None:
    for col in FLAG_COLUMNS:
        if col in rows:
            flagged = rows[col].astype(object).map(lambda v: v is True or v == 1 or str(v).lower() == "true")
            flagged = flagged.astype(bool)
            if flagged.any():
                return col, flagged
    return None


def workload_defaults(rows: pd.DataFrame, normed: pd.DataFrame, keys: pd.Series) -> dict[str, str] | None:
    """The defaults labels are written against: recorded in the rows, else the flagged baseline's values."""
    defaults = recorded_defaults(rows)
    if defaults is not None:
        return defaults
    flagged = _flagged(rows)
    if flagged is None:
        return None
    key = keys[flagged[1]].value_counts().index[0]
    return dict(normed[keys == key].iloc[0])


@dataclass
class Baseline:
    key: str | None  # configuration key, None when there is no baseline
    how: str  # how it was found, or why there is none
    defaults: dict[str, str] | None  # the workload defaults (for labels), None if unknown


def find_baseline(rows: pd.DataFrame, normed: pd.DataFrame, keys: pd.Series, swept: list[str]) -> Baseline:
    """The baseline configuration of one study's rows (all statuses; ``normed``/``keys`` index like rows)."""
    defaults = workload_defaults(rows, normed, keys)
    flagged = _flagged(rows)
    if flagged is not None:
        col, mask = flagged
        return Baseline(keys[mask].value_counts().index[0], f"the configuration the sweeper marked `{col}`", defaults)
    if defaults is None:
        return Baseline(None, "no baseline: no trial is marked as the workload defaults and the rows record no "
                              "defaults (`knob_defaults`, written by sweeps since 2026-12-01)", None)
    match = pd.Series(True, index=rows.index)
    for col in swept:
        want = defaults.get(col, "null")
        match &= (normed[col] == want) | (normed[col] == "null")
    if not match.any():
        shown = ", ".join(f"{short_name(c)}={defaults.get(c, 'null')}" for c in swept)
        return Baseline(None, f"no trial ran the workload defaults ({shown}); speed-ups are not shown", defaults)
    key = keys[match].value_counts().index[0]
    return Baseline(key, "the configuration whose swept knobs equal the workload defaults the rows record", defaults)


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
