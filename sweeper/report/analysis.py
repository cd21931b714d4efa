"""One study analysed: configurations with intervals, ties, Pareto front, baseline speed-ups, diagnosis,
importance, marginal effects, history and failures. Everything the three output formats show comes from here."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sweeper.report import baseline as bl
from sweeper.report.blocks import num
from sweeper.report.data import (
    ABSURD,
    ABSURD_VS_MEDIAN,
    config_columns,
    config_keys,
    implausible_rows,
    normalized,
    objectives_of,
    short_name,
    status_counts,
    unit_of,
    usable,
    varying,
)
from sweeper.report.diagnose import diagnose
from sweeper.report.importance import importance, marginals, recorded_space
from sweeper.report.profiled import profile_diagnosis, profiles
from sweeper.report.stats import aggregate, pareto_mask, rank_configs, ratio_interval

FINGERPRINT = ("gpu_name", "cpu_model", "hostname", "torch_version")


@dataclass
class Analysis:
    workload: str
    study: str
    unit: str
    objectives: list[tuple[str, str]]
    counts: dict[str, int]
    swept: list[str]
    configs: pd.DataFrame  # one row per configuration, best first (see ``analyse``)
    baseline: bl.Baseline
    baseline_note: str = ""
    importance: dict[str, dict[str, float]] = field(default_factory=dict)  # metric -> knob -> importance
    importance_note: str = ""
    marginals: pd.DataFrame = field(default_factory=pd.DataFrame)
    history: pd.DataFrame = field(default_factory=pd.DataFrame)
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    machines: list[str] = field(default_factory=list)
    profiles: pd.DataFrame = field(default_factory=pd.DataFrame)  # each configuration's latest profiled row
    mfu_peaks: list[str] = field(default_factory=list)  # the peaks the rows' MFU divided by (``mfu_peak``)
    single_runs: bool = False  # rows of single runs (no sweep): not a study, no summary line, no recipe, no trend
    not_ranked: list[str] = field(default_factory=list)  # measured rows left out as implausible, each with why
    outside_defaults: list[str] = field(default_factory=list)  # the baseline's knobs not at their default (fixed)
    device_mem_bytes: float | None = None  # the GPU's memory (None on the CPU): what a memory saving is a share of
    why_empty: str = ""  # why nothing was ranked (no configuration measured), from the rows' statuses and reasons

    @property
    def noise_measured(self) -> bool:
        """Whether trial-to-trial noise was measured: some configuration ran more than once (a re-measure of the
        baseline or the best, ``confirm_of`` rows, a repeat). Without it no claim says "beyond noise"."""
        return bool(self.configs.attrs.get("repeats_df") or 0) if not self.configs.empty else False

    def doubt(self, key: str | None = None, name: str = "the best") -> str:
        """Why what the report says of configuration ``key`` (the best by default), its speed-up over the baseline
        above all, is uncertain: ``step times were unstable in every measurement of the best (2)`` (and of the
        baseline), the signature of a shared CPU; "" when some measurement of each was steady."""
        c = self.configs
        key = c.index[0] if key is None and not c.empty else key
        pairs = [(name, key)] + ([("the baseline", self.baseline.key)] if self.baseline.key != key else [])
        whose = [
            f"{who} ({int(c.loc[k, 'n'])})"
            for who, k in pairs
            if k in c.index and c.loc[k, "step_unstable_n"] >= c.loc[k, "n"]
        ]
        return "step times were unstable in every measurement of " + " and of ".join(whose) if whose else ""

    @property
    def title(self) -> str:
        return f"{self.workload} — single runs" if self.single_runs else f"{self.workload} — study {self.study}"


def single_run_rows(rows: pd.DataFrame) -> pd.Series:
    """Rows of single runs (``python -m sweeper +workload=x``, no ``-m``): no trial number in any study."""
    if "trial" not in rows:
        return pd.Series(False, index=rows.index)
    return pd.to_numeric(rows["trial"], errors="coerce").isna()


def configurations(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, list[str]]:
    """(usable rows, normalized config values of all rows, config key of all rows, swept columns)."""
    cols = config_columns(rows)
    normed = normalized(rows, cols)
    keys = config_keys(normed)
    return usable(rows), normed, keys, varying(normed)


def analyse(rows: pd.DataFrame, evaluator: str = "auto") -> Analysis:
    """``rows``: every row of one (workload, study)."""
    ok, normed, keys, swept = configurations(rows)
    objectives = objectives_of(rows)
    base = bl.find_baseline(rows, normed, keys, swept)
    a = Analysis(
        workload=str(rows["workload"].iloc[0]),
        study=str(rows["study"].iloc[0]),
        unit=unit_of(rows),
        objectives=objectives,
        counts=status_counts(rows),
        swept=swept,
        configs=pd.DataFrame(),
        baseline=base,
        failures=_failures(rows),
        machines=_machines(rows),
        single_runs=bool(single_run_rows(rows).all()),
    )
    a.not_ranked = _not_ranked(rows, a.unit)
    a.device_mem_bytes = _device_memory(ok)
    a.outside_defaults = _outside_defaults(normed, keys, base)
    if ok.empty:
        a.why_empty = _why_empty(rows, bool(a.not_ranked))
        return a
    configs = rank_configs(aggregate(ok, keys))
    first = normed.loc[ok.index].groupby(keys.loc[ok.index], sort=False).first()
    values = first.loc[configs.index]
    _name_configs(configs, values, swept, base)
    configs["stability"] = [
        stability_note(u, b, n) for u, b, n in zip(configs["step_unstable_n"], configs["step_bimodal_n"], configs["n"])
    ]
    configs["diagnosis"] = _diagnoses(configs, ok, keys)
    a.profiles = profiles(ok, keys)
    if not a.profiles.empty:  # the profile names the limit where one exists; the rule is the marked fallback
        configs["diagnosis"] = [
            profile_diagnosis(a.profiles.loc[k]) if k in a.profiles.index else f"{d} (rule)"
            for k, d in zip(configs.index, configs["diagnosis"])
        ]
    if "mfu_peak" in ok:
        a.mfu_peaks = sorted({str(v) for v in ok["mfu_peak"].dropna() if str(v)})
    configs["pareto"] = _pareto(configs, ok, keys, objectives)
    a.baseline_note = _speedups(configs, base, rows, keys)
    if a.outside_defaults:
        a.baseline_note += (
            f"; the sweep ran every configuration at {', '.join(a.outside_defaults)}: "
            '"defaults" names the swept knobs\' defaults'
        )
    a.configs = configs
    a.importance, a.importance_note = _importance(configs, values, objectives, evaluator, recorded_space(rows))
    a.marginals = marginals(configs, values, swept)
    a.history = _history(ok, objectives)
    return a


def _name_configs(configs: pd.DataFrame, values: pd.DataFrame, swept: list[str], base: bl.Baseline) -> None:
    """Each configuration's swept values (``v:<knob>`` columns), its label, short name and brief label."""
    for col in swept:
        configs[f"v:{col}"] = values[col]
    records = values.to_dict("records")
    configs["label"] = [bl.label(v, swept, base.defaults) for v in records]
    configs["name"] = short_names(configs["label"].tolist())
    brief = _brief_labels(configs["label"].tolist(), records, swept)
    configs["label_brief"] = [b if len(b) <= NAME_WIDTH else n for b, n in zip(brief, configs["name"])]


def _diagnoses(configs: pd.DataFrame, ok: pd.DataFrame, keys: pd.Series) -> list[str]:
    """What limits each configuration, by the rule (``diagnose``), from its metrics and the data stage its trials
    named most often."""
    stages = (
        ok["data_limit_stage"].groupby(keys.loc[ok.index], sort=False).agg(_most_common).reindex(configs.index)
        if "data_limit_stage" in ok
        else pd.Series(None, index=configs.index)
    )
    return [
        diagnose(w, u, m, s, h)
        for w, u, m, s, h in zip(
            configs["data_wait_frac"], configs["gpu_util_mean"], configs["mfu"], stages, configs["host_step_frac"]
        )
    ]


def _outside_defaults(normed: pd.DataFrame, keys: pd.Series, base: bl.Baseline) -> list[str]:
    """``compile=off (default: default)`` for each knob or parameter the baseline ran at another value than the
    recorded default (fixed by the sweep, a default outside its space): then the baseline is not the defaults."""
    if base.key is None or not base.defaults or not (keys == base.key).any():
        return []
    values = normed[keys == base.key].iloc[0]
    return [
        f"{short_name(c)}={values[c]} (default: {d})"
        for c, d in sorted(base.defaults.items())
        if c in values.index and values[c] != "null" and d != "null" and values[c] != d
    ]


def _device_memory(ok: pd.DataFrame) -> float | None:
    """The smallest GPU memory the measured rows ran on; None for CPU rows (or none recorded)."""
    if "gpu_mem_bytes" not in ok or "device" not in ok:
        return None
    gpu = ok["device"].astype(str).str.startswith("cuda")
    mem = pd.to_numeric(ok.loc[gpu, "gpu_mem_bytes"], errors="coerce").dropna()
    return float(mem.min()) if len(mem) and mem.min() > 0 else None


def _not_ranked(rows: pd.DataFrame, unit: str) -> list[str]:
    out = []
    for _, r in implausible_rows(rows).iterrows():
        trial = r.get("trial")
        who = f"trial {int(trial)}" if pd.notna(trial) else "a single run"
        out.append(
            f"{who}: a throughput of {num(r['throughput'])} {unit} is not a measurement (over {num(ABSURD)} "
            f"a second, or {num(ABSURD_VS_MEDIAN)} times this study's median): not ranked; check that row"
        )
    return out


def _why_empty(rows: pd.DataFrame, implausible: bool) -> str:
    """``no measured row: 1 failed (exception:ValueError), 2 interrupted``."""
    parts = []
    for status, part in rows.groupby(rows["status"].astype(str), sort=True):
        reasons = sorted({str(r) for r in part.get("reason", pd.Series(dtype=object)).dropna() if str(r)})
        parts.append(f"{len(part)} {status}" + (f" ({', '.join(reasons[:3])})" if reasons else ""))
    text = "no measured row: " + ", ".join(parts)
    return text + ("; the measured values are implausible (below)" if implausible else "")


def stability_note(unstable: int, bimodal: int, n: int) -> str:
    """Empty for steady step times, else one phrase: ``step times unstable (bimodal) in 1 of 2 measurements:
    re-measured`` (``sweeper.trial.stability``: two speeds, or a CV over 0.5: the signature of a shared CPU)."""
    if not unstable:
        return ""
    kind = "bimodal" if bimodal else "CV over 0.5"
    if n <= 1:
        return f"step times unstable ({kind}): measured once"
    if unstable >= n:
        return f"step times unstable ({kind}) in all {n} measurements: re-measured, still unstable"
    return f"step times unstable ({kind}) in {unstable} of {n} measurements: re-measured"


NAME_WIDTH = 30  # a configuration label longer than this is named C<position> in tables, with a legend


def short_names(labels: list[str]) -> list[str]:
    """What tables call each configuration (listed by throughput): its label where short, else ``C<position>``
    (``C1``: the best), which the section's legend spells out, so a table row stays at most a few lines tall."""
    return [lab if len(lab) <= NAME_WIDTH else f"C{i}" for i, lab in enumerate(labels, start=1)]


def _brief_labels(labels: list[str], records: list[dict], swept: list[str]) -> list[str]:
    """For a terminal's narrow column: each configuration as what differs from the listed first (``#1 +
    batch_size=128``) when that is shorter than what differs from the defaults (the full label, in the files)."""
    if not records:
        return []
    out = [labels[0]]
    for label, values in zip(labels[1:], records[1:]):
        diff = bl.label(values, swept, {c: records[0].get(c, "null") for c in swept})
        vs_first = f"#1 + {diff}" if diff not in ("defaults", "(one configuration)") else "= #1"
        out.append(vs_first if len(vs_first) < len(label) else label)
    return out


def _most_common(values: pd.Series) -> str | None:
    values = values.dropna()
    return str(values.mode().iloc[0]) if len(values) else None


def _pareto(configs: pd.DataFrame, ok: pd.DataFrame, keys: pd.Series, objectives) -> np.ndarray:
    if len(objectives) < 2:
        objectives = [("throughput", "maximize"), ("peak_mem_bytes", "minimize")]
    cols, directions = [], []
    for metric, direction in objectives:
        if metric == "throughput":
            values = configs["value"].to_numpy(float)
        else:
            means = (
                pd.to_numeric(ok[metric], errors="coerce").groupby(keys.loc[ok.index]).mean()
                if metric in ok
                else pd.Series(dtype=float)
            )
            values = means.reindex(configs.index).to_numpy(float)
        if np.isfinite(values).any():  # a metric nobody measured (no memory counter) leaves the front
            cols.append(values)
            directions.append(direction)
    if not cols:
        return np.zeros(len(configs), dtype=bool)
    return pareto_mask(np.column_stack(cols), directions)


def _speedups(configs: pd.DataFrame, base: bl.Baseline, rows: pd.DataFrame, keys: pd.Series) -> str:
    for c in ("speedup", "speedup_lo", "speedup_hi"):
        configs[c] = np.nan
    configs["is_baseline"] = configs.index == base.key
    if base.key is None:
        return base.how
    if base.key not in configs.index:
        failed = rows[keys == base.key]
        why = ", ".join(
            f"trial {t}: {s} {r}".strip()
            for t, s, r in zip(failed.get("trial", []), failed["status"], failed.get("reason", [""] * len(failed)))
        )
        return f"the baseline configuration has no usable measurement ({why}); speed-ups are not shown"
    cols = [c for c in ("value", "rel_se", "df", "noise_of") if c in configs]
    b = configs.loc[base.key, cols].to_dict()
    r, lo, hi = (
        pd.Series(v, index=configs.index, dtype=float)
        for v in zip(*(ratio_interval(row, b) for row in configs[cols].to_dict("records")))
    )
    configs["speedup"] = r
    if configs.attrs.get("repeats_df"):  # an interval only where trial-to-trial noise was measured
        configs["speedup_lo"], configs["speedup_hi"] = lo, hi
        return f"baseline: {base.how}"
    return (
        f"baseline: {base.how}. Each configuration was measured once: no noise estimate, so speed-ups have no "
        "interval (the sweep re-measures the baseline and the best to measure it)"
    )


def _importance(configs: pd.DataFrame, values: pd.DataFrame, objectives, evaluator: str, space: dict):
    out: dict[str, dict[str, float]] = {}
    note = ""
    metrics = [("throughput", "maximize")] + [(m, d) for m, d in objectives if m == "peak_mem_bytes"]
    for metric, direction in metrics:
        target = configs["value"] if metric == "throughput" else configs["peak_mem_bytes"]
        imp, why = importance(values, target.rename(metric), direction, evaluator, space)
        if imp:
            out[metric] = imp
        note = note or why
    return out, note


def _history(ok: pd.DataFrame, objectives) -> pd.DataFrame:
    maximize = dict(objectives).get("throughput", "maximize") == "maximize"
    h = pd.DataFrame({"trial": pd.to_numeric(ok["trial"], errors="coerce"), "value": ok["throughput"].astype(float)})
    h = h.dropna(subset=["trial"]).sort_values("trial")
    h["best"] = h["value"].cummax() if maximize else h["value"].cummin()
    return h.reset_index(drop=True)


def _failures(rows: pd.DataFrame) -> pd.DataFrame:
    bad = rows[rows["status"].isin(["failed", "infeasible"])]
    cols = [c for c in ("trial", "status", "reason", "message") if c in bad]
    return bad[cols].sort_values("trial").reset_index(drop=True) if len(bad) else pd.DataFrame(columns=cols)


def _machines(rows: pd.DataFrame) -> list[str]:
    """``cpu:AMD EPYC on vm, torch 2.11``: the machines the trials ran on, from the trials' own fingerprints. A row
    that never ran (skipped, interrupted before its trial started) records only the sweeper's host name: it names
    no machine, and a fact nobody measured is left out rather than shown as ``?``."""
    cols = [c for c in FINGERPRINT if c in rows]
    if not cols:
        return []
    ran = rows[rows["status"] != "skipped"] if "status" in rows else rows  # a skipped trial never ran anywhere
    seen = ran[cols].astype(object).fillna("").astype(str)
    measured = [c for c in ("gpu_name", "cpu_model", "torch_version") if c in seen]
    seen = seen[(seen[measured] != "").any(axis=1)].drop_duplicates() if measured else seen.iloc[0:0]
    out = []
    for r in seen.to_dict("records"):
        device = r.get("gpu_name") or (f"cpu:{r['cpu_model']}" if r.get("cpu_model") else "")
        parts = [device or "an unrecorded device"]
        if r.get("hostname"):
            parts.append(f"on {r['hostname']}")
        text = " ".join(parts) + (f", torch {r['torch_version']}" if r.get("torch_version") else "")
        out.append(text)
    return out
