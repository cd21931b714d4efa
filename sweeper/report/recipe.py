"""``python -m sweeper.report RESULTS --recipe``: each study's configuration to adopt, as the Hydra overrides that
re-run it and as the PyTorch lines that apply it in a training script.

The configuration is the fastest one measured, unless another, tied with it within noise and not slower than the
baseline beyond noise, saves at least ``MEMORY_SHARE`` of a GPU's memory (both numbers are said; on the CPU peak
memory is the process's RSS and never chooses). The recipe names what it was measured under (device, torch's CPU
threads, batch) and, on the CPU, sets the same thread count. The report writes it into report.md, report.html and
recipe.json as well. The lines come from the knobs' own snippet tables (``RECIPE``, a literal beside where each
knob is applied: ``workloads/common.py``, ``workloads/data.py``, the workload's module, a user's own module named
by the rows' ``workload_module``), read from the modules' source with ``ast``: nothing is imported, so the recipe
works on rows copied to a machine without torch. Lines are those of the device the study ran on; a knob without an
entry is named in a note, never left out silently.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from sweeper.report.analysis import Analysis
from sweeper.report.blocks import mib, num, pct, times
from sweeper.report.data import config_columns, config_keys, norm, normalized, short_name, usable
from sweeper.report.recipe_dist import distributed_lines
from sweeper.report.recipe_source import Tables, tables_for
from sweeper.report.stats import applied_interval
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


MEMORY_SHARE = 0.10  # a saving of peak memory that matters: this share of the device's memory (a GPU's)


def _memory_choice(a: Analysis, fastest: pd.Series, group: pd.DataFrame) -> tuple[str, str] | None:
    """Another configuration tied with the fastest that saves at least ``MEMORY_SHARE`` of the device's memory,
    with why (both throughputs, both memories); None on the CPU (peak memory there is the process's RSS, mostly
    torch itself, never a reason to adopt a slower configuration) or where no saving matters."""
    device_mem = a.device_mem_bytes
    if not device_mem or len(group) < 2:
        return None
    mem = pd.to_numeric(group["peak_mem_bytes"], errors="coerce")
    if mem.isna().all() or pd.isna(fastest["peak_mem_bytes"]):
        return None
    key = str(mem.idxmin())
    saving = float(fastest["peak_mem_bytes"]) - float(mem[key])
    if key == fastest.name or saving < MEMORY_SHARE * device_mem:
        return None
    r = group.loc[key]
    return key, (
        f"tied within noise with the fastest ({num(r['value'])} vs {num(fastest['value'])} {a.unit}) and "
        f"{mib(saving)} MiB less peak memory ({mib(r['peak_mem_bytes'])} vs {mib(fastest['peak_mem_bytes'])} MiB), "
        f"{pct(saving / device_mem)} of the device's {mib(device_mem)} MiB (a saving of {pct(MEMORY_SHARE)} or "
        "more counts)"
    )


def choose(a: Analysis) -> tuple[str, str]:
    """(config key, why): the configuration to adopt.

    The fastest configuration measured, unless another, tied with it within noise and not slower than the baseline
    beyond noise, saves memory that matters on the device (``MEMORY_SHARE`` of a GPU's memory; never on the CPU):
    then that one, and why says both throughputs and both memories. The baseline is called "the workload defaults"
    only when its configuration is the defaults (a default outside the swept space makes it another one)."""
    c = a.configs
    fastest = c.iloc[0]
    group = c[c["rank"] == fastest["rank"]]
    base = a.baseline.key if a.baseline.key in c.index else None
    defaults = base is not None and str(c.loc[base, "label"]) == "defaults" and not a.outside_defaults
    if base is not None:
        hi = c["speedup_hi"].where(c["speedup_hi"].notna(), c["speedup"])
        group = group[~(hi.loc[group.index] < 1.0)]  # slower than the baseline beyond noise: never recommended
    picked = _memory_choice(a, fastest, group)
    if picked:
        return picked
    key = str(c.index[0])
    if key == base:
        if defaults:
            return key, "the workload defaults are the fastest configuration measured; keep them"
        return key, (
            "the fastest configuration measured is the sweep's baseline, not the workload defaults: "
            f"{', '.join(a.outside_defaults) or fastest['label']} (a default outside the swept space)"
        )
    why = "the fastest configuration measured"
    if base is not None and fastest["rank"] == c.loc[base, "rank"]:
        what = "the workload defaults" if defaults else "the sweep's baseline"
        ratio = times(fastest["speedup"], fastest["speedup_lo"], fastest["speedup_hi"])
        why += f"; not faster than {what} beyond noise ({ratio}): {what} may do as well"
    return key, why


@dataclass
class Recipe:
    """One study's configuration to adopt, in every form the report writes it."""

    workload: str
    study: str
    label: str
    why: str
    value: float
    unit: str
    speedup: float | None
    speedup_lo: float | None  # the 95 % range one timing of the applied recipe shows (stats.applied_interval)
    speedup_hi: float | None
    doubt: str
    conditions: dict[str, Any]  # what it was measured under: device, cpu_threads, batch
    knobs: dict[str, Any]
    command: str  # re-runs it
    own_workload: bool
    lines: list[str]
    notes: list[str] = field(default_factory=list)

    def conditions_text(self) -> str:
        c = self.conditions
        parts = [f"{c['device']}" + (f" ({c['device_name']})" if c.get("device_name") else "")]
        if c.get("cpu_threads"):
            parts.append(f"{c['cpu_threads']} torch CPU thread{'s' * (c['cpu_threads'] != 1)} (cpu_threads)")
        parts += [f"{k} {v}" for k, v in c.get("batch", {}).items()]
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("value", "speedup", "speedup_lo", "speedup_hi"):
            v = out[k]
            out[k] = None if v is None or not math.isfinite(float(v)) else float(v)
        return out


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def conditions(row: pd.Series, columns: list[str]) -> dict[str, Any]:
    """What a configuration was measured under: the device, torch's CPU threads, the batch settings."""
    device = device_kind(row)
    name = _value(row.get("gpu_name")) if device == "cuda" else _value(row.get("cpu_model"))
    threads = _number(row.get("cpu_threads"))
    batch = {short_name(c): norm(row[c]) for c in columns if "batch" in c and norm(row.get(c)) != "null"}
    return {
        "device": device,
        "device_name": str(name or ""),
        "cpu_threads": int(threads) if threads else None,
        "batch": batch,
    }


def _applied(a: Analysis, key: str) -> tuple[float | None, float | None]:
    """The speed-up over the baseline that applying the recipe and timing it once is expected to show (95 %,
    ``stats.applied_interval``); None where the noise was not measured."""
    c = a.configs
    base = a.baseline.key
    if base not in c.index or pd.isna(c.loc[key, "speedup_lo"]):
        return None, None
    cols = [x for x in ("value", "rel_se", "df", "noise_of", "n") if x in c]
    lo, hi = applied_interval(c.loc[key, cols].to_dict(), c.loc[base, cols].to_dict())
    return _number(lo), _number(hi)


def recipe_of(a: Analysis, rows: pd.DataFrame) -> Recipe | None:
    """The recipe of one analysed study (``rows``: the rows of its workload, any studies); None without one."""
    if getattr(a, "single_runs", False) or a.configs.empty:
        return None
    key, why = choose(a)
    study = rows[(rows["study"].astype(str) == a.study) & (rows["workload"].astype(str) == a.workload)]
    ok = usable(study)
    columns = config_columns(study)  # this workload's keys only: other workloads' columns are null here
    keys = config_keys(normalized(ok, columns))
    row = ok[keys == key].iloc[0]
    chosen = a.configs.loc[key]
    module = _value(row.get("workload_module"))
    tables = tables_for(a.workload, module)
    cond = conditions(row, columns)
    lines = code_lines(row, columns, tables)
    if cond["device"] == "cpu" and cond["cpu_threads"]:
        lines.insert(0, f"torch.set_num_threads({cond['cpu_threads']})  # as measured: speed-ups hold at this count")
    own = bool(module)
    command = (
        "python -m sweeper " + ("-cd conf " if own else "") + " ".join(shlex.quote(o) for o in overrides(row, columns))
    )
    knobs = {
        c[len("knob.") :]: _integral(_value(row[c]))
        for c in columns
        if c.startswith("knob.") and not c.startswith("knob.distributed.") and _value(row[c]) is not None
    }
    speedup = _number(chosen["speedup"])
    lo, hi = _applied(a, key) if speedup is not None else (None, None)
    return Recipe(
        a.workload,
        a.study,
        str(chosen["label"]),
        why,
        float(chosen["value"]),
        a.unit,
        speedup,
        lo,
        hi,
        a.doubt(key, "it") if speedup is not None else "",
        cond,
        knobs,
        command,
        own,
        lines,
        [*missing_entries(row, columns, tables), *tables.notes],
    )


def missing_entries(row: pd.Series, columns: list[str], tables: Tables) -> list[str]:
    """One note per knob of the row that no ``RECIPE`` table has an entry for (nothing is left out silently)."""
    out = []
    for c in columns:
        if not c.startswith("knob.") or c.startswith("knob.distributed."):
            continue
        name, value = c[len("knob.") :], _value(row[c])
        if value is None or name in tables.loader_args or any(name in t for t in tables.recipes):
            continue
        out.append(
            f"knob {name}={norm(_integral(value))} has no RECIPE entry, so no line for it here: apply it as "
            f"your workload does, or declare RECIPE = {{'{name}': {{'{norm(_integral(value))}': "
            "['<your line>']}} in its module (README: Your own model)"
        )
    return out


def recipe_lines(r: Recipe) -> list[str]:
    """The recipe as text lines (comments, the command, indented code lines)."""
    speed = f", {times(r.speedup)} the baseline" if r.speedup is not None else ""
    if speed and r.speedup_lo is not None:  # what timing it once in one's own script is expected to show
        speed += f" (applied: {times(r.speedup_lo)}–{times(r.speedup_hi)}, 95 %)"
    speed += f" (uncertain: {r.doubt})" if speed and r.doubt else ""
    out = [
        f"# {r.label}: {num(r.value)} {r.unit}{speed}; {r.why}",
        f"# measured on {r.conditions_text()}",
        "# re-run it (from the folder you swept in"
        + (", whose conf/ holds this workload's YAML):" if r.own_workload else "):"),
        r.command,
        f"# apply it in a training script ({r.conditions['device']}, as measured):"
        if r.lines
        else "# no line of code: its knobs are what PyTorch does by default",
    ]
    out += [f"    {line}" for line in r.lines]
    out += [f"# {note}" for note in r.notes]
    return out


def recipes(analyses: list[Analysis], rows: pd.DataFrame) -> list[Recipe]:
    return [r for a in analyses if (r := recipe_of(a, rows)) is not None]


def recipe_text(analyses: list[Analysis], rows: pd.DataFrame) -> str:
    """The recipe of every analysed study, as text for the terminal (one block per study); single runs (no
    study) are not studies and get none."""
    out: list[str] = []
    for a in analyses:
        if getattr(a, "single_runs", False):
            continue
        out.append(f"# {a.title}")
        r = recipe_of(a, rows)
        if r is None:
            out += [f"no measured configuration ({a.why_empty or 'no completed trial'}): nothing to recommend", ""]
            continue
        out += recipe_lines(r) + [""]
    if not out:
        return "no study here (single runs only): run a sweep (-m) for a configuration to adopt"
    return "\n".join(out)


def recipes_json(analyses: list[Analysis], rows: pd.DataFrame) -> str:
    """``recipe.json``: every study's recipe, machine-readable (the fields of ``Recipe``)."""
    return json.dumps({"recipes": [r.to_json() for r in recipes(analyses, rows)]}, indent=2, default=str)
