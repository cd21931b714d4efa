"""``python -m sweeper.report RESULTS --recipe``: each study's configuration to adopt, as the Hydra overrides that
re-run it and as the PyTorch lines that apply it in a training script.

The configuration is the best one, or, among those tied with it within noise, the one with the least peak memory.
The lines come from the knobs' own snippet tables, declared beside where each knob is applied (``RECIPE`` in
``workloads/common.py``, ``workloads/data.py``, the workload's module; ``workloads.parallel.recipe``): torch is
imported for them, so this part of the report needs the package's dependencies (not a GPU).
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

import pandas as pd

from sweeper.report.analysis import Analysis
from sweeper.report.blocks import num, times
from sweeper.report.data import config_columns, config_keys, norm, normalized, usable

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/+-]*")


def choose(a: Analysis) -> tuple[str, str]:
    """(config key, why): the least-memory configuration of the best's tie group."""
    c = a.configs
    group = c[c["rank"] == c.iloc[0]["rank"]]
    mem = pd.to_numeric(group["peak_mem_bytes"], errors="coerce")
    if len(group) > 1 and mem.notna().any():
        return str(mem.idxmin()), (
            f"the least peak memory of the {len(group)} configurations tied with the best within noise"
        )
    return str(c.index[0]), "the best"


def hydra_value(value: Any) -> str:
    """A row's value as a Hydra override value that parses back to the same value and type."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "null"
    text = norm(value)
    if isinstance(value, str):
        if value.startswith(("[", "{")):
            return value  # a list or mapping parameter, stored as its text
        plain = _PLAIN.fullmatch(value) and value not in ("true", "false", "null")
        return value if plain else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def overrides(row: pd.Series) -> list[str]:
    """The overrides of one row's configuration: workload, preset, every knob and parameter it ran with (the
    distributed knobs when it ran distributed)."""
    out = [f"+workload={row['workload']}", f"preset={row.get('preset') or 'none'}"]
    distributed = str(row.get("knob.distributed.strategy") or "none") != "none"
    for col in row.index:
        if col.startswith("knob.distributed."):
            if distributed:
                out.append(f"distributed.{col[len('knob.distributed.') :]}={hydra_value(row[col])}")
        elif col.startswith("knob."):
            out.append(f"knobs.{col[len('knob.') :]}={hydra_value(row[col])}")
        elif col.startswith("param."):
            out.append(f"workload.{col[len('param.') :]}={hydra_value(row[col])}")
    return out


def _value(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _integral(v: Any) -> Any:
    """A whole-number float as an int: a knob inactive in some rows is a float column in Parquet (NaN there), but a
    DataLoader argument or ``os.nice`` wants ``4``, not ``4.0``; every knob goes through it before its snippet."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def code_lines(row: pd.Series) -> list[str]:
    """The PyTorch lines that apply the row's knobs, from the knobs' own snippet tables."""
    import workloads
    from workloads import common, data, parallel

    tables: list[dict[str, Any]] = [common.RECIPE, data.RECIPE]
    try:
        tables.insert(0, getattr(workloads.load(str(row["workload"])), "RECIPE", {}))
    except Exception:  # noqa: BLE001 - a workload of the user's own, not importable here: the shared knobs remain
        pass
    knobs = {
        c[len("knob.") :]: _integral(_value(row[c]))
        for c in row.index
        if c.startswith("knob.") and not c.startswith("knob.distributed.")
    }
    lines: list[str] = []
    for name, value in knobs.items():
        snippet = next((t[name] for t in tables if name in t), None)
        if snippet is not None:
            lines += snippet(value)
    loader = {k: knobs[k] for k in data.RECIPE_LOADER_ARGS if knobs.get(k) is not None}
    if loader:
        args = ", ".join(f"{k}={v!r}" for k, v in loader.items())
        lines.append(f"loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, {args})")
    if str(row.get("knob.distributed.strategy") or "none") != "none":
        dist = {c[len("knob.distributed.") :]: _value(row[c]) for c in row.index if c.startswith("knob.distributed.")}
        world = int(_value(row.get("world_size")) or dist.get("nproc") or 1)
        lines += parallel.recipe(dist, world)
    return list(dict.fromkeys(lines))  # a line two knobs both need (TF32 flags), once


def recipe_text(analyses: list[Analysis], rows: pd.DataFrame) -> str:
    """The recipe of every analysed study, as text for the terminal (one block per study)."""
    out: list[str] = []
    for a in analyses:
        out.append(f"# {a.title}")
        if a.configs.empty:
            out += ["no completed trial: nothing to recommend", ""]
            continue
        key, why = choose(a)
        study = rows[(rows["study"].astype(str) == a.study) & (rows["workload"].astype(str) == a.workload)]
        ok = usable(study)
        keys = config_keys(normalized(ok, config_columns(study)))
        row = ok[keys == key].iloc[0]
        best = a.configs.loc[key]
        speed = f", {times(best['speedup'])} the baseline" if pd.notna(best["speedup"]) else ""
        out.append(f"# {best['label']}: {num(best['value'])} {a.unit}{speed}; {why}")
        out.append("# re-run it (from the folder you swept in; add -cd <your conf> for a workload of your own):")
        out.append("python -m sweeper " + " ".join(shlex.quote(o) for o in overrides(row)))
        lines = code_lines(row)
        out.append("# apply it in a training script:" if lines else "# no knob of it needs code (the defaults)")
        out += [f"    {line}" for line in lines]
        out.append("")
    return "\n".join(out)
