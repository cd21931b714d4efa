"""``python -m sweeper.report RESULTS --recipe``: each study's configuration to adopt, as the Hydra overrides that
re-run it and as the PyTorch lines that apply it in a training script.

The configuration is the fastest one, or, among those tied with it within noise and not slower than the baseline
beyond noise, the one with the least peak memory; when no configuration beats the baseline beyond noise, the
workload defaults. The lines come from the knobs' own snippet tables (``RECIPE``, a literal beside where each
knob is applied: ``workloads/common.py``, ``workloads/data.py``, the workload's module, a user's own module named
by the rows' ``workload_module``), read from the modules' source with ``ast``: nothing is imported, so the recipe
works on rows copied to a machine without torch. Lines are those of the device the study ran on.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

import pandas as pd

from sweeper.report.analysis import Analysis
from sweeper.report.blocks import num, times
from sweeper.report.data import config_columns, config_keys, norm, normalized, usable
from sweeper.report.recipe_dist import distributed_lines
from sweeper.report.recipe_source import Tables, tables_for
from sweeper.results.keys import override_string

# Strings Hydra's grammar reads as something else when unquoted (case-insensitive): booleans, null, inf, nan.
_RESERVED = {"true", "false", "null", "inf", "+inf", "-inf", "nan"}


def _plain(text: str) -> bool:
    """Whether Hydra reads ``text`` unquoted back as this same string."""
    import re

    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:/+-]*", text)) and text.lower() not in _RESERVED


def hydra_value(value: Any, key: str = "k") -> str:
    """A row's value as a Hydra override value that parses back to the same value and type: a plain word bare,
    anything Hydra would re-read (inf, nan, 1e3, true, null, text with spaces) quoted (``override_string``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "null"
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, str):
        if value.startswith(("[", "{")):
            return value  # a list or mapping parameter, stored as its text
        if _plain(value):
            return value
    elif isinstance(value, float) and value.is_integer():
        value = int(value)  # a whole number of a float column (a knob null in other rows)
    return override_string(key, value).split("=", 1)[1]


def _row_columns(row: pd.Series, columns: list[str] | None) -> list[str]:
    return [c for c in row.index if columns is None or c in columns]


def _distributed(row: pd.Series) -> bool:
    return str(norm(row.get("knob.distributed.strategy")) or "none") not in ("none", "null")


def overrides(row: pd.Series, columns: list[str] | None = None) -> list[str]:
    """The overrides of one row's configuration: workload, preset, every knob and parameter of its workload
    (``columns``: the config columns of its study; other workloads' columns are never written), the distributed
    knobs when it ran distributed."""
    out = [f"+workload={row['workload']}", f"preset={row.get('preset') or 'none'}"]
    distributed = _distributed(row)
    for col in _row_columns(row, columns):
        if col.startswith("knob.distributed."):
            if distributed:
                key = f"distributed.{col[len('knob.distributed.') :]}"
                out.append(f"{key}={hydra_value(row[col], key)}")
        elif col.startswith("knob."):
            key = f"knobs.{col[len('knob.') :]}"
            out.append(f"{key}={hydra_value(row[col], key)}")
        elif col.startswith("param."):
            key = f"workload.{col[len('param.') :]}"
            out.append(f"{key}={hydra_value(row[col], key)}")
    return out


def _value(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _integral(v: Any) -> Any:
    """A whole-number float as an int: a knob inactive in some rows is a float column in Parquet (NaN there), but a
    DataLoader argument or ``os.nice`` wants ``4``, not ``4.0``; every knob goes through it before its snippet."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def device_kind(row: pd.Series) -> str:
    """``cpu`` or ``cuda``: the device the row ran on (``cuda`` when it recorded a GPU)."""
    device = str(_value(row.get("device")) or "")
    if device.startswith("cuda") or (not device and str(_value(row.get("gpu_name")) or "")):
        return "cuda"
    return "cpu"


def snippet(entry: dict[str, list[str]], value: Any, device: str) -> list[str]:
    """The lines of one knob's table entry for ``value`` on ``device`` (see ``workloads.common.RECIPE``)."""
    if value is None:
        return []
    spelled = norm(value)
    for key in (f"{spelled}@{device}", f"*@{device}", spelled, "*"):  # the device's lines first
        if key in entry:
            return list(entry[key])
    return []


def _fill(line: str, value: Any, device: str, optimizer: str | None) -> str:
    line = line.replace("{value}", norm(value)).replace("{device}", device)
    if "{optimizer}" in line:
        if optimizer:
            line = line.replace("{optimizer}", optimizer)
        else:
            line = (
                line.replace("{optimizer}", "YourOptimizer")
                + "  # the report could not read which optimizer this model uses: put yours"
            )
    return line


def code_lines(row: pd.Series, columns: list[str] | None = None, tables: Tables | None = None) -> list[str]:
    """The PyTorch lines that apply the row's knobs on the device it ran on, from the knobs' own snippet tables."""
    tables = tables or tables_for(str(row["workload"]), _value(row.get("workload_module")))
    device = device_kind(row)
    knobs = {
        c[len("knob.") :]: _integral(_value(row[c]))
        for c in _row_columns(row, columns)
        if c.startswith("knob.") and not c.startswith("knob.distributed.")
    }
    lines: list[str] = []
    for name, value in knobs.items():
        entry = next((t[name] for t in tables.recipes if name in t), None)
        if entry is not None:
            lines += [_fill(line, value, device, tables.optimizer) for line in snippet(entry, value, device)]
    loader = {k: knobs[k] for k in tables.loader_args if knobs.get(k) is not None}
    if loader:
        args = ", ".join(f"{k}={v!r}" for k, v in loader.items())
        lines.append(f"loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, {args})")
    if _distributed(row):
        dist = {c[len("knob.distributed.") :]: _value(row[c]) for c in row.index if c.startswith("knob.distributed.")}
        world = int(_value(row.get("world_size")) or dist.get("nproc") or 1)
        lines += distributed_lines(dist, world, device)
    return list(dict.fromkeys(lines))  # a line two knobs both need, once


def choose(a: Analysis) -> tuple[str, str]:
    """(config key, why): the configuration to adopt.

    The fastest configuration's tie group (within noise of it), less those slower than the baseline beyond noise;
    of them, the one with the least peak memory. When the baseline itself is in that group (nothing beats it beyond
    noise), the baseline: the defaults are best."""
    c = a.configs
    group = c[c["rank"] == c.iloc[0]["rank"]]
    base = a.baseline.key if a.baseline.key in c.index else None
    if base is not None:
        if base in group.index:
            if base == c.index[0]:
                return base, "the workload defaults are the fastest configuration measured; keep them"
            return base, (
                f"the workload defaults: no configuration is faster beyond noise (the fastest, "
                f"{c.iloc[0]['label']}, measured {times(c.iloc[0]['speedup'])} the baseline)"
            )
        hi = c["speedup_hi"].where(c["speedup_hi"].notna(), c["speedup"])
        group = group[~(hi.loc[group.index] < 1.0)]  # slower than the baseline beyond noise: never recommended
        if group.empty:
            return base, "the workload defaults: every configuration tied with the fastest is slower than them"
    mem = pd.to_numeric(group["peak_mem_bytes"], errors="coerce")
    if len(group) > 1 and mem.notna().any():
        return str(mem.idxmin()), (
            f"the least peak memory of the {len(group)} configurations tied with the fastest within noise"
            + (" and not slower than the baseline" if base is not None else "")
        )
    return str(group.index[0]), "the fastest"


def recipe_text(analyses: list[Analysis], rows: pd.DataFrame) -> str:
    """The recipe of every analysed study, as text for the terminal (one block per study); single runs (no
    study) are not studies and get none."""
    out: list[str] = []
    for a in analyses:
        if getattr(a, "single_runs", False):
            continue
        out.append(f"# {a.title}")
        if a.configs.empty:
            out += ["no completed trial: nothing to recommend", ""]
            continue
        key, why = choose(a)
        study = rows[(rows["study"].astype(str) == a.study) & (rows["workload"].astype(str) == a.workload)]
        ok = usable(study)
        columns = config_columns(study)  # this workload's keys only: other workloads' columns are null here
        keys = config_keys(normalized(ok, columns))
        row = ok[keys == key].iloc[0]
        chosen = a.configs.loc[key]
        speed = f", {times(chosen['speedup'])} the baseline" if pd.notna(chosen["speedup"]) else ""
        doubt = a.doubt(key, "it")
        speed += f" (uncertain: {doubt})" if speed and doubt else ""
        out.append(f"# {chosen['label']}: {num(chosen['value'])} {a.unit}{speed}; {why}")
        out.append("# re-run it (from the folder you swept in; add -cd <your conf> for a workload of your own):")
        out.append("python -m sweeper " + " ".join(shlex.quote(o) for o in overrides(row, columns)))
        tables = tables_for(a.workload, _value(row.get("workload_module")))
        lines = code_lines(row, columns, tables)
        out.append(
            f"# apply it in a training script ({device_kind(row)}, as measured):"
            if lines
            else "# no line of code: its knobs are what PyTorch does by default"
        )
        out += [f"    {line}" for line in lines]
        out += [f"# {note}" for note in tables.notes]
        out.append("")
    if not out:
        return "no study here (single runs only): run a sweep (-m) for a configuration to adopt"
    return "\n".join(out)
