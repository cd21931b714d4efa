"""Nightly comparison: tonight against a baseline night, regressions beyond noise, and the trend over nights.

``--baseline`` names a study, or a date YYYY-MM-DD matched against the UTC date of ``started_at``. Tonight is the
latest other night of the same kind: the study (not the baseline) whose trials started last, or the latest
date after the baseline date; ``--study`` picks tonight's study explicitly.

A configuration (or tonight's best against the baseline's best) regresses when tonight's 95 % interval lies
entirely below the baseline's (beyond noise) and the drop is at least the threshold (``--fail-on-regression``,
default 0 %).
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
from sweeper.report.data import night_of, unit_of, usable
from sweeper.report.stats import aggregate, disjoint_below, rank_configs, ratio

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class BadInput(ValueError):
    """A flag value the report cannot use; the message is the one-line error."""


@dataclass
class Nightly:
    baseline: str
    tonight: str
    kind: str  # study | date
    blocks: list[Block] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)


def split(df: pd.DataFrame, spec: str, tonight_studies: list[str] | None) -> tuple[pd.Series, pd.Series, str, str]:
    """(baseline mask, tonight mask, kind, tonight's name) over ``df``'s rows."""
    studies = sorted(df["study"].astype(str).unique())
    nights = night_of(df)
    if spec in studies:
        kind, base = "study", df["study"].astype(str) == spec
        unit = df["study"].astype(str)
    elif _DATE.fullmatch(spec):
        if pd.isna(pd.to_datetime(spec, errors="coerce", format="%Y-%m-%d")):
            raise BadInput(f"error: `--baseline`: {spec!r} is not a valid date; use YYYY-MM-DD")
        kind, base, unit = "date", nights == spec, nights
        if not base.any():
            raise BadInput(f"error: `--baseline {spec}`: no trial started on that date (UTC); nights present: "
                           f"{', '.join(sorted(nights.unique()))}")
    else:
        raise BadInput(f"error: `--baseline`: {spec!r} is neither a study nor a date YYYY-MM-DD; studies: "
                       f"{', '.join(studies) or 'none'}")
    rest = ~base
    if tonight_studies:
        rest &= df["study"].astype(str).isin(tonight_studies)
    if kind == "date":
        rest &= nights > spec
    if not rest.any():
        raise BadInput(f"error: `--baseline {spec}`: no trials after the baseline to compare with it; run "
                       f"tonight's sweep first (or pass --study)")
    started = pd.to_datetime(df["started_at"], utc=True, errors="coerce")
    latest = started[rest].groupby(unit[rest]).max().sort_values()
    name = str(latest.index[-1]) if len(latest) else str(unit[rest].iloc[0])
    return base, rest & (unit == name), kind, name


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
    base, now, kind, name = split(df, spec, tonight_studies)
    n = Nightly(baseline=spec, tonight=name, kind=kind)
    gate = threshold or 0.0
    n.blocks.append(Heading(f"Nightly: {name} vs baseline {spec}", 2))
    n.blocks.append(Para(f"A regression is a drop beyond noise (tonight's 95% interval entirely below the "
                         f"baseline's) of at least {gate:.0%}.", "note"))
    for workload in sorted(set(df.loc[now, "workload"]) & set(df.loc[base, "workload"])):
        w = df["workload"] == workload
        n.blocks += _workload(df[w & (base | now)], base[w & (base | now)], gate, limit, n.regressions)
    missing = sorted(set(df.loc[base, "workload"]) - set(df.loc[now, "workload"]))
    if missing:
        n.blocks.append(Para(f"Not run tonight: {', '.join(missing)}.", "alert"))
    n.blocks += trend_blocks(df, with_plots)
    verdict = (f"{len(n.regressions)} regression(s): " + "; ".join(n.regressions)) if n.regressions \
        else "No regression beyond noise."
    n.blocks.insert(1, Para(verdict, "alert" if n.regressions else "text"))
    return n


def _workload(rows: pd.DataFrame, is_base: pd.Series, gate: float, limit: int, regressions: list[str]) -> list[Block]:
    workload = str(rows["workload"].iloc[0])
    unit = unit_of(rows)
    ok, normed, keys, swept = configurations(rows)
    defaults = workload_defaults(rows, normed, keys)
    first = normed.groupby(keys).first()
    names = {k: label(v, swept, defaults) for k, v in zip(first.index, first.to_dict("records"))}
    b_ok, n_ok = ok[is_base.loc[ok.index]], ok[~is_base.loc[ok.index]]
    out: list[Block] = [Heading(f"{workload}", 3)]
    if b_ok.empty or n_ok.empty:
        out.append(Para(f"{workload}: no completed trials {'in the baseline' if b_ok.empty else 'tonight'}.",
                        "alert"))
        return out
    b, t = rank_configs(aggregate(b_ok, keys)), rank_configs(aggregate(n_ok, keys))
    bb, tb = b.iloc[0], t.iloc[0]
    r, lo, hi = ratio(tb["value"], tb["rel_se"], tb["t"], bb["value"], bb["rel_se"], bb["t"])
    verdict = _verdict(tb, bb, r, gate)
    if verdict == "regression":
        regressions.append(f"{workload} best {names[tb.name]}: {times(r, lo, hi)} of baseline best")
    out.append(Table("Tonight's best vs the baseline's best",
                     ["", "configuration", f"throughput ({unit})", "95% CI", "trials"],
                     [[who, names[c.iloc[0].name], num(c.iloc[0]["value"]), interval(c.iloc[0]["lo"], c.iloc[0]["hi"]),
                       str(int(c["n"].sum()))] for who, c in (("baseline", b), ("tonight", t))],
                     align="llrrr", note=f"tonight / baseline: {times(r, lo, hi)} -> {verdict}",
                     marks=["", "bad" if verdict == "regression" else ""]))
    common = b.index.intersection(t.index)
    if len(common):
        rows_out, marks = [], []
        x, y = b.loc[common], t.loc[common]
        rr, rlo, rhi = ratio(y["value"], y["rel_se"], y["t"], x["value"], x["rel_se"], x["t"])
        order = np.argsort(np.asarray(rr, float))
        for i in order:
            k = common[i]
            v = _verdict(y.loc[k], x.loc[k], rr.iloc[i], gate)
            if v == "regression":
                regressions.append(f"{workload} {names[k]}: {times(rr.iloc[i])}")
            rows_out.append([names[k], num(x.loc[k, "value"]), interval(x.loc[k, "lo"], x.loc[k, "hi"]),
                             num(y.loc[k, "value"]), interval(y.loc[k, "lo"], y.loc[k, "hi"]),
                             times(rr.iloc[i], rlo.iloc[i], rhi.iloc[i]), v])
            marks.append("bad" if v == "regression" else "")
        shown = min(limit, len(rows_out))
        out.append(Table(f"Common configurations ({len(common)}), worst first",
                         ["configuration", f"baseline ({unit})", "baseline CI", f"tonight ({unit})", "tonight CI",
                          "tonight / baseline", "verdict"], rows_out[:shown], align="lrrrrrl", marks=marks[:shown],
                         more=len(rows_out) - shown))
    else:
        out.append(Para("No configuration ran both nights; only the best configurations compare.", "note"))
    return out


def _verdict(now: pd.Series, base: pd.Series, r: float, gate: float) -> str:
    below = disjoint_below(now["lo"], now["hi"], base["lo"], base["hi"])
    above = disjoint_below(base["lo"], base["hi"], now["lo"], now["hi"])
    if below and 1 - r >= gate:
        return "regression"
    if below:
        return f"slower, under the {gate:.0%} threshold"
    return "faster" if above else "within noise"


def trend(df: pd.DataFrame) -> pd.DataFrame:
    """Best throughput per workload and night (UTC date of started_at), with the night's trial count."""
    ok = usable(df)
    if ok.empty:
        return pd.DataFrame(columns=["workload", "night", "best", "trials", "unit"])
    t = pd.DataFrame({"workload": ok["workload"], "night": night_of(ok), "value": ok["throughput"].astype(float)})
    g = t.groupby(["workload", "night"], sort=True)["value"]
    out = pd.DataFrame({"best": g.max(), "trials": g.size()}).reset_index()
    out["unit"] = out["workload"].map(lambda w: unit_of(df[df["workload"] == w]))
    return out


def trend_blocks(df: pd.DataFrame, with_plots: bool) -> list[Block]:
    t = trend(df)
    if t.empty:
        return []
    rows = [[r["workload"], r["night"], num(r["best"]), r["unit"], str(r["trials"])] for _, r in t.iterrows()]
    out: list[Block] = [Table("Best throughput per night", ["workload", "night", "best", "unit", "trials"], rows,
                              align="llrlr", note="night = UTC date a trial started")]
    if with_plots and t["night"].nunique() > 1:
        for unit, part in t.groupby("unit"):
            out.append(Plot("Trend over nights", plots.trend(part, str(unit))))
    return out
