"""Nightly comparison: tonight's study against a baseline study, per configuration, and the trend over nights.

A night is a study (a nightly job gives each run its own study name), never a UTC date: six studies run on one day
are six nights. ``--baseline`` names a study, ``latest`` (the last study that started before tonight's), or a date
YYYY-MM-DD (the last study that started on that UTC date). Tonight is ``--study`` (the latest of those given), else
the latest study that started after the baseline (``latest``: the latest study of all).

The gate compares like with like: a configuration (same knob and workload-parameter values) measured in both
studies. Its ratio tonight / baseline gets a 95 % interval from the repeats behind each side (``stats.aggregate``:
the configuration's own between-trial spread where it was repeated, else the widest of its study's repeated
configurations alike to it). It is a regression when the whole interval
lies below ``1 - threshold``. A configuration without repeats on either side has no between-trial noise estimate:
it is shown, never gated. Tonight's best against the baseline's best (different configurations) is shown for
information and never gated; when the workload parameters differ between the nights, that is said instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sweeper.report import plots
from sweeper.report.analysis import configurations
from sweeper.report.baseline import label, workload_defaults
from sweeper.report.blocks import Block, Heading, Para, Plot, Table, interval, num, times
from sweeper.report.data import norm, unit_of, usable
from sweeper.report.stats import aggregate, rank_configs, ratio

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class BadInput(ValueError):
    """A flag value the report cannot use; the message is the one-line error."""


@dataclass
class Nightly:
    baseline: str
    tonight: str
    blocks: list[Block] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    not_gated: list[str] = field(default_factory=list)  # why a workload could not be gated (parameters differ, ...)


def nights(df: pd.DataFrame) -> pd.DataFrame:
    """One row per study (a night), ordered by when its first trial started: ``study``, ``start``, ``end``."""
    started = pd.to_datetime(df["started_at"], utc=True, errors="coerce")
    g = started.groupby(df["study"].astype(str))
    out = pd.DataFrame({"start": g.min(), "end": g.max()}).reset_index(names="study")
    return out.sort_values(["start", "study"], na_position="first").reset_index(drop=True)


def has_nights(df: pd.DataFrame) -> bool:
    """Whether some workload was measured in more than one study (a trend has something to show)."""
    return bool(len(df)) and bool((df.groupby("workload")["study"].nunique() > 1).any())


def select(df: pd.DataFrame, spec: str, tonight_studies: list[str] | None) -> tuple[str, str]:
    """(baseline study, tonight's study) for ``--baseline spec`` and ``--study``; raises BadInput."""
    order = nights(df)
    names = order["study"].tolist()
    start = dict(zip(order["study"], order["start"]))
    tonight = None
    if tonight_studies:
        tonight = max(tonight_studies, key=lambda s: (start[s], names.index(s)))
    if spec in names:
        base = spec
    elif spec == "latest":
        before = [s for s in names if s != tonight and (tonight is None or _earlier(start[s], start[tonight]))]
        if tonight is None:
            before = before[:-1]
        if not before:
            raise BadInput(f"error: `--baseline latest`: no study started before tonight's "
                           f"({tonight or (names[-1] if names else 'none')}); run a sweep the night before first")
        base = before[-1]
    elif _DATE.fullmatch(spec):
        if pd.isna(pd.to_datetime(spec, errors="coerce", format="%Y-%m-%d")):
            raise BadInput(f"error: `--baseline`: {spec!r} is not a valid date; use YYYY-MM-DD")
        that_day = [s for s in names if pd.notna(start[s]) and start[s].strftime("%Y-%m-%d") == spec]
        if not that_day:
            days = sorted({t.strftime("%Y-%m-%d") for t in order["start"].dropna()})
            raise BadInput(f"error: `--baseline {spec}`: no study started on that date (UTC); dates with studies: "
                           f"{', '.join(days) or 'none'}")
        base = that_day[-1]
    else:
        raise BadInput(f"error: `--baseline`: {spec!r} is neither a study, `latest`, nor a date YYYY-MM-DD; "
                       f"studies: {', '.join(names) or 'none'}")
    if tonight is None:
        after = [s for s in names[names.index(base) + 1:]]
        if not after:
            raise BadInput(f"error: `--baseline {spec}`: no study started after the baseline ({base}) to compare "
                           f"with it; run tonight's sweep first (or pass --study)")
        tonight = after[-1]
    if tonight == base:
        raise BadInput(f"error: `--baseline {spec}`: the baseline is tonight's study ({base}); pass another "
                       f"--baseline or --study")
    return base, tonight


def _earlier(a: pd.Timestamp, b: pd.Timestamp) -> bool:
    return bool(pd.notna(a) and pd.notna(b) and a < b)


def parse_threshold(text: str | None) -> float | None:
    """``5%`` or ``5`` -> 0.05; None when not given. Raises BadInput naming the flag."""
    if text is None:
        return None
    try:
        value = float(str(text).strip().rstrip("%"))
    except ValueError:
        raise BadInput(f"error: `--fail-on-regression`: {text!r} is not a percentage; use e.g. 5% or 5") from None
    if not 0 <= value < 100:
        raise BadInput(f"error: `--fail-on-regression`: {text!r} must be between 0% and 100%")
    return value / 100


def nightly(df: pd.DataFrame, spec: str, tonight_studies: list[str] | None, threshold: float | None,
            limit: int, with_plots: bool = True) -> Nightly:
    base_name, name = select(df, spec, tonight_studies)
    study = df["study"].astype(str)
    base, now = study == base_name, study == name
    n = Nightly(baseline=base_name, tonight=name)
    gate = threshold or 0.0
    n.blocks.append(Heading(f"Nightly: {name} vs baseline {base_name}", 2))
    n.blocks.append(Para(f"Per configuration measured both nights: tonight / baseline with its 95% interval from "
                         f"the repeats; a regression when the whole interval lies below {1 - gate:.2f} "
                         f"(a drop of more than {gate:.0%}). Configurations without repeats on both nights are "
                         f"shown, not gated.", "note"))
    for workload in sorted(set(df.loc[now, "workload"]) & set(df.loc[base, "workload"])):
        w = df["workload"] == workload
        n.blocks += _workload(df[w & (base | now)], base[w & (base | now)], gate, limit, n)
    missing = sorted(set(df.loc[base, "workload"]) - set(df.loc[now, "workload"]))
    if missing:
        n.blocks.append(Para(f"Not run tonight: {', '.join(missing)}.", "alert"))
    n.blocks += _warnings(df[base | now])
    n.blocks += trend_blocks(df, with_plots)
    if n.regressions:
        verdict = f"{len(n.regressions)} regression(s): " + "; ".join(n.regressions)
    else:
        verdict = "No regression beyond noise and the threshold."
    if n.not_gated:
        verdict += " Not gated: " + "; ".join(n.not_gated)
    n.blocks.insert(1, Para(verdict, "alert" if n.regressions or n.not_gated else "text"))
    return n


def differing_params(rows: pd.DataFrame, is_base: pd.Series) -> dict[str, tuple[list[str], list[str]]]:
    """``param.*`` columns whose values differ between the nights: {column: (baseline values, tonight's)}."""
    out = {}
    for col in (c for c in rows.columns if c.startswith("param.")):
        b = sorted({norm(v) for v in rows.loc[is_base, col]})
        t = sorted({norm(v) for v in rows.loc[~is_base, col]})
        if b != t:
            out[col] = (b, t)
    return out


def _workload(rows: pd.DataFrame, is_base: pd.Series, gate: float, limit: int, n: Nightly) -> list[Block]:
    workload = str(rows["workload"].iloc[0])
    unit = unit_of(rows)
    ok, normed, keys, swept = configurations(rows)
    defaults = workload_defaults(rows, normed, keys)
    first = normed.groupby(keys).first()
    names = {k: label(v, swept, defaults) for k, v in zip(first.index, first.to_dict("records"))}
    b_ok, n_ok = ok[is_base.loc[ok.index]], ok[~is_base.loc[ok.index]]
    out: list[Block] = [Heading(workload, 3)]
    if b_ok.empty or n_ok.empty:
        out.append(Para(f"{workload}: no completed trials {'in the baseline' if b_ok.empty else 'tonight'}.",
                        "alert"))
        n.not_gated.append(f"{workload}: no completed trials {'in the baseline' if b_ok.empty else 'tonight'}")
        return out
    b, t = rank_configs(aggregate(b_ok, keys)), rank_configs(aggregate(n_ok, keys))
    params = differing_params(ok, is_base.loc[ok.index])
    common = b.index.intersection(t.index)
    if params:
        said = "; ".join(f"{c.split('.', 1)[1]}: {', '.join(v[0])} in the baseline, {', '.join(v[1])} tonight"
                         for c, v in params.items())
        out.append(Para(f"The workload parameters differ between the nights ({said}): only configurations with "
                        f"equal parameters compare, and the best configurations are not set against each other.",
                        "alert"))
    out.append(_bests(b, t, names, unit, bool(params)))
    if len(common) == 0:
        why = "the workload parameters differ" if params else "no configuration was measured both nights"
        out.append(Para(f"{workload}: nothing gated, {why}. Let tonight re-measure last night's best "
                        f"configurations (see the README's nightly command).", "alert"))
        n.not_gated.append(f"{workload}: {why}")
        return out
    x, y = b.loc[common], t.loc[common]
    rr, rlo, rhi = ratio(y["value"], y["rel_se"], y["t"], x["value"], x["rel_se"], x["t"])
    # Between-trial noise is known on a night with a repeated configuration (its own, or borrowed from one alike).
    repeated = pd.Series(bool((b["n"] > 1).any() and (t["n"] > 1).any()), index=common)
    rows_out, marks = [], []
    for i in np.argsort(np.asarray(rhi, float)):
        k = common[i]
        r, lo, hi = float(rr.iloc[i]), float(rlo.iloc[i]), float(rhi.iloc[i])
        trials = f"{int(x.loc[k, 'n'])} + {int(y.loc[k, 'n'])}"
        v = verdict(r, lo, hi, gate, bool(repeated.iloc[i]))
        if v == "regression":
            n.regressions.append(f"{workload} {names[k]}: {_ratio(r, lo, hi)} of the baseline, below "
                                 f"{1 - gate:.2f} ({trials} trials)")
        rows_out.append([names[k], num(x.loc[k, "value"]), num(y.loc[k, "value"]), _ratio(r, lo, hi), trials, v])
        marks.append("bad" if v == "regression" else "")
    if not repeated.any():
        n.not_gated.append(f"{workload}: no configuration has repeats on both nights")
    shown = min(limit, len(rows_out))
    out.append(Table(f"Configurations measured both nights ({len(common)}), worst first",
                     ["configuration", f"baseline ({unit})", f"tonight ({unit})", "tonight / baseline (95% CI)",
                      "trials (baseline + tonight)", "verdict"], rows_out[:shown], align="lrrrrl",
                     marks=marks[:shown], more=len(rows_out) - shown))
    return out


def _ratio(r: float, lo: float, hi: float) -> str:
    """``0.903x (0.889–0.917)``: three decimals, so an interval's end is not rounded onto the gate."""
    if not np.isfinite(r):
        return "-"
    if max(abs(r), abs(lo), abs(hi)) >= 10_000:  # never 301 digits: the blocks' compact form
        return times(r, lo, hi)
    return f"{r:.3f}x ({lo:.3f}–{hi:.3f})"


def verdict(r: float, lo: float, hi: float, gate: float, repeated: bool) -> str:
    """What a ratio interval says: regression only beyond noise and the threshold, and only with repeats."""
    if not repeated:
        return "not gated: needs repeats both nights"
    if np.isfinite(hi) and hi < 1 - gate:
        return "regression"
    if np.isfinite(hi) and hi < 1:
        return f"slower, within the {gate:.0%} threshold"
    if np.isfinite(lo) and lo > 1:
        return "faster"
    return "unchanged within noise"


def _bests(b: pd.DataFrame, t: pd.DataFrame, names: dict[str, str], unit: str, params_differ: bool) -> Table:
    bb, tb = b.iloc[0], t.iloc[0]
    if params_differ:
        note = "not compared: the workload parameters differ"
    elif bb.name == tb.name:
        note = "the same configuration is best both nights (gated below)"
    else:
        r, lo, hi = ratio(tb["value"], tb["rel_se"], tb["t"], bb["value"], bb["rel_se"], bb["t"])
        note = f"tonight's best / the baseline's best: {times(r, lo, hi)} (different configurations: not gated)"
    return Table("Each night's best", ["", "configuration", f"throughput ({unit})", "95% CI", "trials"],
                 [[who, names[c.name], num(c["value"]), interval(c["lo"], c["hi"]), str(int(c["n"]))]
                  for who, c in (("baseline", bb), ("tonight", tb))], align="llrrr", note=note)


def _warnings(rows: pd.DataFrame) -> list[Block]:
    """Rows whose measurement cannot be trusted for a gate: a window cut short, a device shared."""
    out: list[Block] = []
    for col, what in (("window_capped", ("measured windows shorter than measure.min_time_s because "
                                         "measure.max_steps stopped them (raise max_steps or use preset=nightly)")),
                      ("node_shared", "measured while another trial ran on the same device (node_shared)")):
        if col in rows:
            hit = rows[col].astype(object).map(lambda v: v is True or v is np.True_).astype(bool)
            if hit.any():
                studies = ", ".join(sorted(rows.loc[hit, "study"].astype(str).unique()))
                out.append(Para(f"{int(hit.sum())} trial(s) of {studies} {what}.", "alert"))
    return out


def trend(df: pd.DataFrame) -> pd.DataFrame:
    """One point per workload and night (study): the night's best configuration with its 95 % interval and the
    trials behind it, ordered by when the night started."""
    cols = ["workload", "night", "started", "best", "lo", "hi", "trials", "unit"]
    ok = usable(df)
    if ok.empty:
        return pd.DataFrame(columns=cols)
    start = dict(zip(*nights(df)[["study", "start"]].T.to_numpy()))
    out = []
    for (workload, study), rows in df.groupby(["workload", df["study"].astype(str)], sort=False):
        if rows.index.intersection(ok.index).empty:
            continue  # nothing measured to the end that night
        good, _normed, keys, _swept = configurations(rows)
        best = rank_configs(aggregate(good, keys)).iloc[0]
        out.append([workload, study, start.get(study), best["value"], best["lo"], best["hi"], int(best["n"]),
                    unit_of(rows)])
    t = pd.DataFrame(out, columns=cols)
    return t.sort_values(["workload", "started", "night"], na_position="first").reset_index(drop=True)


def trend_blocks(df: pd.DataFrame, with_plots: bool) -> list[Block]:
    t = trend(df)
    if t.empty:
        return []
    rows = [[r["workload"], r["night"], r["started"].strftime("%Y-%m-%d %H:%M") if pd.notna(r["started"]) else "-",
             num(r["best"]), interval(r["lo"], r["hi"]), r["unit"], str(r["trials"])] for _, r in t.iterrows()]
    out: list[Block] = [Table("Best throughput per night", ["workload", "night (study)", "started (UTC)", "best",
                                                            "95% CI", "unit", "trials of the best"], rows,
                              align="lllrrlr", note="one point per study, ordered by its first trial's start")]
    if with_plots and len(t) > 1:
        for unit, part in t.groupby("unit"):
            out.append(Plot("Trend over nights", plots.trend(part, str(unit))))
    return out
