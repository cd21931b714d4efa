"""Noise-aware statistics of configurations: one row per configuration, a confidence interval, ties, Pareto.

Noise model (all on the log scale, so intervals are relative and ratios of throughputs are differences):

- **Within a trial**: throughput = work / mean step time, so its relative standard error is ``step_cv /
  sqrt(steps_measured)`` (when ``step_cv`` is missing, the step spread is estimated as ``(p90 - p10) / 2.563``,
  the 10-90 % range of a normal distribution).
- **Between trials**: configurations measured more than once (``repeat=true``, ``confirm_top_k``) give the spread
  of log throughput from one trial (process) to the next. It is pooled over every repeated configuration of the
  study (as in a one-way ANOVA), so a configuration measured once also gets the study's between-trial noise.
- One trial's uncertainty is the larger of the two; a configuration's mean over ``n`` trials divides it by
  ``sqrt(n)``. The interval is ``mean * exp(+-t * se)`` with Student's t at 95 % (degrees of freedom of the pooled
  repeats, else of the steps).

Ties: configuration A is ranked ahead of B only when A's interval lies entirely above B's. A configuration's
rank is 1 + the number of configurations ahead of it beyond noise, so configurations within noise share a rank.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sweeper.report import student_t

LEVEL = 0.95
_NORMAL_10_90 = 2.5631  # (p90 - p10) / sigma for a normal distribution
MEAN_METRICS = ("peak_mem_bytes", "step_cv", "data_wait_frac", "gpu_util_mean", "mfu", "achieved_tflops",
                "step_ms_p50", "compile_s", "first_step_s", "host_step_frac")
FLAGS = ("step_bimodal", "step_unstable")  # per configuration: ``<flag>_n``, how many of its trials were flagged


def t_quantile(df: float) -> float:
    return float(student_t.ppf(0.5 + LEVEL / 2, df)) if df and df > 0 and math.isfinite(df) else float("nan")


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(df[name], errors="coerce") if name in df else pd.Series(np.nan, index=df.index)


def step_rel_se(rows: pd.DataFrame) -> pd.Series:
    """Relative standard error of each row's throughput from its own step-time distribution."""
    cv = _col(rows, "step_cv")
    mean = _col(rows, "step_ms_mean").fillna(_col(rows, "step_ms_p50"))
    spread = (_col(rows, "step_ms_p90") - _col(rows, "step_ms_p10")) / _NORMAL_10_90 / mean
    cv = cv.where(cv.notna(), spread)
    return cv / np.sqrt(_col(rows, "steps_measured").clip(lower=1))


def aggregate(ok: pd.DataFrame, keys: pd.Series, metric: str = "throughput") -> pd.DataFrame:
    """One row per configuration (index: its key) with the mean of ``metric``, its interval and the diagnosis
    metrics. ``ok`` holds usable rows only; ``keys`` names each row's configuration."""
    value = _col(ok, metric)
    frame = pd.DataFrame({"key": keys.loc[ok.index], "value": value, "log": np.log(value.where(value > 0)),
                          "rse2": step_rel_se(ok) ** 2, "steps": _col(ok, "steps_measured"),
                          "trial": ok["trial"] if "trial" in ok else pd.Series(np.nan, index=ok.index)})
    for m in MEAN_METRICS:
        frame[m] = _col(ok, m)
    for flag in FLAGS:  # step times in two clusters / unstable (sweeper.trial.stability): counted per configuration
        frame[flag] = ok[flag].map(lambda v: isinstance(v, (bool, np.bool_)) and bool(v)) if flag in ok else False
    g = frame.groupby("key", sort=False)
    out = pd.DataFrame({
        "n": g.size(), "value": g["value"].mean(), "log_var": g["log"].var(ddof=1), "rse2": g["rse2"].mean(),
        "steps": g["steps"].median(),
        "trials": g["trial"].agg(lambda s: ",".join(str(int(t)) for t in sorted(s.dropna()))),
        "first_trial": g["trial"].min(),
    })
    for m in MEAN_METRICS:
        out[m] = g[m].mean()
    for flag in FLAGS:
        out[f"{flag}_n"] = g[flag].sum().astype(int)
    out.index.name = "key"
    return add_intervals(out)


def add_intervals(out: pd.DataFrame) -> pd.DataFrame:
    """Interval columns ``rel_se``, ``t``, ``lo``, ``hi``, ``noise`` from ``n``, ``value``, ``log_var``, ``rse2``."""
    rep = out[out["n"] > 1]
    dof = float((rep["n"] - 1).sum())
    pooled = math.sqrt(float(((rep["n"] - 1) * rep["log_var"].fillna(0)).sum()) / dof) if dof > 0 else math.nan
    within = np.sqrt(out["rse2"])
    use_pooled = pd.Series(math.isfinite(pooled), index=out.index) & ~(within > pooled)
    per_trial = within.where(~use_pooled, pooled)
    out = out.copy()
    out["rel_se"] = per_trial / np.sqrt(out["n"])
    df_steps = out["steps"].to_numpy(float) - 1
    with np.errstate(invalid="ignore"):  # one vectorized call: a report may hold thousands of configurations
        t_steps = pd.Series(np.where(df_steps > 0, student_t.ppf(0.5 + LEVEL / 2, np.where(df_steps > 0, df_steps, 1)),
                                     np.nan), index=out.index)
    out["t"] = t_steps.where(~use_pooled, t_quantile(dof))
    half = (out["t"] * out["rel_se"]).fillna(0.0)
    out["lo"] = out["value"] * np.exp(-half)
    out["hi"] = out["value"] * np.exp(half)
    out["noise"] = np.where(use_pooled, f"repeats (pooled, df={int(dof)})",
                            np.where(out["rel_se"].notna(), "step times", "unknown"))
    out.attrs["pooled_rel_sd"] = pooled
    out.attrs["pooled_df"] = dof
    return out


def tie_ranks(lo: np.ndarray, hi: np.ndarray, maximize: bool = True) -> np.ndarray:
    """1 + the number of entries ahead of each entry beyond noise (intervals disjoint)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if not maximize:
        lo, hi = -hi, -lo
    ahead = len(lo) - np.searchsorted(np.sort(lo), hi, side="right")
    return 1 + ahead


def group_ranks(value: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Ranks for entries listed by ``value``, best (largest) first: a run of entries within noise of the run's
    first entry (their intervals overlap its interval) shares that entry's position as its rank; the next entry
    beyond noise starts a new run. So the listed order never contradicts the values, and ties read as groups
    (1, 1, 3, 4, 4 ...). Returned in the input's order."""
    value, lo, hi = (np.asarray(x, float) for x in (value, lo, hi))
    order = np.argsort(-np.nan_to_num(value, nan=-np.inf), kind="stable")
    ranks = np.zeros(len(value), dtype=int)
    leader_lo = np.nan
    rank = 0
    for position, i in enumerate(order, start=1):
        if rank == 0 or not (hi[i] >= leader_lo):  # beyond noise of the run's leader (or no interval): new run
            rank, leader_lo = position, lo[i]
        ranks[i] = rank
    return ranks


def rank_configs(configs: pd.DataFrame) -> pd.DataFrame:
    """Adds ``rank`` (a run of configurations within noise of the run's best shares it, see ``group_ranks``),
    ``tied`` (another configuration has the same rank) and ``rank_memory``; sorted by value, best first."""
    out = configs.copy()
    out["rank"] = group_ranks(out["value"].to_numpy(), out["lo"].to_numpy(), out["hi"].to_numpy())
    out["tied"] = out.groupby("rank")["rank"].transform("size") > 1
    out["rank_memory"] = out["peak_mem_bytes"].rank(ascending=True, method="min").astype("Int64")
    return out.sort_values(["value", "rank"], ascending=[False, True], na_position="last", kind="stable")


def pareto_mask(values: np.ndarray, directions: list[str]) -> np.ndarray:
    """Rows of ``values`` (n x k) not dominated by any other row, for the given directions."""
    signed = np.asarray(values, float) * np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    mask = np.ones(len(signed), dtype=bool)
    front: list[np.ndarray] = []
    for i in np.lexsort(signed.T[::-1]):
        row = signed[i]
        if not np.all(np.isfinite(row)) or any(np.all(f <= row) and np.any(f < row) for f in front):
            mask[i] = False
        else:
            front.append(row)
    return mask


def ratio(value: pd.Series | float, rel_se: pd.Series | float, t: pd.Series | float,
          ref_value: float, ref_rel_se: float, ref_t: float) -> tuple:
    """``value / ref_value`` with its interval (relative errors add in quadrature on the log scale)."""
    r = value / ref_value
    se = np.sqrt(np.square(rel_se) + ref_rel_se ** 2)
    tq = np.fmax(t, ref_t)
    half = np.nan_to_num(tq * se)
    return r, r * np.exp(-half), r * np.exp(half)


def disjoint_below(lo_a: float, hi_a: float, lo_b: float, hi_b: float) -> bool:
    """True when interval a lies entirely below interval b (a is worse than b beyond noise)."""
    return bool(hi_a < lo_b) if all(map(math.isfinite, (hi_a, lo_b))) else False
