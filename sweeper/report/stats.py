"""Noise-aware statistics of configurations: one row per configuration, a confidence interval, ties, Pareto.

Noise model (all on the log scale, so intervals are relative and ratios of throughputs are differences):

- **Within a trial**: throughput = work / mean step time, so its relative standard error is ``step_cv /
  sqrt(steps_measured)`` (when ``step_cv`` is missing, the step spread is estimated as ``(p90 - p10) / 2.563``,
  the 10-90 % range of a normal distribution).
- **Between trials**, measured where a configuration ran more than once (``repeat=true``, ``confirm_top_k``, the
  re-measured baseline and best): the spread of its own log throughputs, with ``n - 1`` degrees of freedom. It is
  never pooled with other configurations' spreads: a data-bound baseline's 13 % from one process to the next says
  nothing of a compute-bound configuration's 0.5 %, and on a shared CPU one configuration's repeats may differ by
  40 % while another's agree.
- **A configuration measured once** borrows the spread of configurations whose noise is alike: those of its own
  limit (data-bound or not, ``diagnose.DATA_WAIT``) that were repeated, the largest of their spreads (with its
  degrees of freedom). So it never gets a tight interval from one lucky pair of repeats; with one degree of
  freedom, Student's t (12.7) makes it wide. None of its limit repeated, it has its step-time noise only, as in a
  sweep without repeats: the other limit's spread says nothing of it (an H100's JPEG baseline, data-bound, its two
  trials 20 % apart, once lent every compiled GPU-fed configuration an interval of 464-73,706 img/s, and the
  report called a best 14x the baseline tied with it).
- One trial's uncertainty is the larger of the between-trial spread and its own step-time noise; a configuration's
  mean over ``n`` trials divides it by ``sqrt(n)``. The interval is ``mean * exp(+-t * se)`` with Student's t at
  95 %.

Ties: configuration A is ahead of B beyond noise when the 95 % interval of ``log(A / B)`` excludes 0 (Welch's
t-test: the two standard errors add in quadrature; degrees of freedom by Welch-Satterthwaite, or the one estimate's
when both borrow the same spread). Listed by value, a run of configurations not ahead-separated from the run's
first shares that one's rank; otherwise ties are claimed only where the evidence does not separate the two.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from sweeper.report import student_t
from sweeper.report.diagnose import DATA_WAIT

LEVEL = 0.95
_NORMAL_10_90 = 2.5631  # (p90 - p10) / sigma for a normal distribution
MEAN_METRICS = (
    "peak_mem_bytes",
    "step_cv",
    "data_wait_frac",
    "gpu_util_mean",
    "mfu",
    "achieved_tflops",
    "step_ms_p50",
    "compile_s",
    "first_step_s",
    "host_step_frac",
)
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
    frame = pd.DataFrame(
        {
            "key": keys.loc[ok.index],
            "value": value,
            "log": np.log(value.where(value > 0)),
            "rse2": step_rel_se(ok) ** 2,
            "steps": _col(ok, "steps_measured"),
            "trial": ok["trial"] if "trial" in ok else pd.Series(np.nan, index=ok.index),
        }
    )
    for m in MEAN_METRICS:
        frame[m] = _col(ok, m)
    for flag in FLAGS:  # step times in two clusters / unstable (sweeper.trial.stability): counted per configuration
        frame[flag] = ok[flag].map(lambda v: isinstance(v, (bool, np.bool_)) and bool(v)) if flag in ok else False
    g = frame.groupby("key", sort=False)
    out = pd.DataFrame(
        {
            "n": g.size(),
            "value": g["value"].mean(),
            "log_var": g["log"].var(ddof=1),
            "rse2": g["rse2"].mean(),
            "steps": g["steps"].median(),
            "trials": g["trial"].agg(lambda s: ",".join(str(int(t)) for t in sorted(s.dropna()))),
            "first_trial": g["trial"].min(),
        }
    )
    for m in MEAN_METRICS:
        out[m] = g[m].mean()
    for flag in FLAGS:
        out[f"{flag}_n"] = g[flag].sum().astype(int)
    out.index.name = "key"
    return add_intervals(out)


def noise_family(data_wait: pd.Series) -> pd.Series:
    """Configurations whose trial-to-trial noise is alike: ``data`` (data-bound: the input pipeline's noise) or
    ``compute`` (everything else)."""
    return pd.Series(
        np.where(pd.to_numeric(data_wait, errors="coerce") >= DATA_WAIT, "data", "compute"), index=data_wait.index
    )


def add_intervals(out: pd.DataFrame) -> pd.DataFrame:
    """Interval columns from ``n``, ``value``, ``log_var``, ``rse2`` (and ``data_wait_frac``): ``between`` (the
    between-trial variance of log throughput used), ``noise_of`` (the configuration whose repeats measured it),
    ``df``, ``rel_se``, ``t``, ``lo``, ``hi``, ``noise``. See the module docstring."""
    out = out.copy()
    n = out["n"].astype(float)
    repeated = n > 1
    family = noise_family(out["data_wait_frac"] if "data_wait_frac" in out else pd.Series(np.nan, index=out.index))
    between = out["log_var"].where(repeated).astype(float)
    bdf = (n - 1).where(repeated)
    noise_of = pd.Series(np.where(repeated, out.index.to_numpy(), None), index=out.index, dtype=object)
    reps = out.index[repeated & between.notna().to_numpy()]
    if len(reps):
        widest = {f: between.loc[k].idxmax() for f, k in pd.Series(reps, index=reps).groupby(family.loc[reps])}
        once = ~repeated.to_numpy() & family.isin(list(widest)).to_numpy()  # of a limit with repeats
        src = family[once].map(widest)  # vectorized: thousands of configurations
        between[once] = between.loc[src.to_numpy()].to_numpy()
        bdf[once] = bdf.loc[src.to_numpy()].to_numpy()
        noise_of[once] = src.to_numpy()
    rse2 = out["rse2"].astype(float)
    use_between = between.notna() & ~(rse2 > between)
    per_trial = between.where(use_between, rse2)
    out["between"], out["noise_of"] = between, noise_of.where(use_between, None)
    out["rel_se"] = np.sqrt(per_trial / n)
    df_steps = (out["steps"].astype(float) - 1).where(lambda s: s > 0)
    out["df"] = bdf.where(use_between, df_steps)
    out["t"] = t_values(out["df"])
    half = (out["t"] * out["rel_se"]).fillna(0.0)
    out["lo"] = out["value"] * np.exp(-half)
    out["hi"] = out["value"] * np.exp(half)
    borrowed = use_between & ~repeated
    out["noise"] = np.where(
        use_between & repeated,
        "its repeats",
        np.where(borrowed, "alike configurations' repeats", np.where(out["rel_se"].notna(), "step times", "unknown")),
    )
    own = np.sqrt(out["log_var"].where(repeated))
    out.attrs["repeats_df"] = float((n - 1).where(repeated, 0).sum())  # repeats measured at all: a noise estimate
    out.attrs["repeated"] = int(repeated.sum())
    out.attrs["spread_range"] = (float(own.min()), float(own.max())) if own.notna().any() else None
    return out


def t_values(df: pd.Series) -> pd.Series:
    """Student's t at 95 % for each entry's degrees of freedom (NaN where there are none)."""
    d = pd.to_numeric(df, errors="coerce").to_numpy(float)
    ok = np.isfinite(d) & (d > 0)
    with np.errstate(invalid="ignore"):  # one vectorized call: a report may hold thousands of configurations
        t = np.where(ok, student_t.ppf(0.5 + LEVEL / 2, np.where(ok, d, 1.0)), np.nan)
    return pd.Series(t, index=df.index)


def welch_df(se_a: float, df_a: float, se_b: float, df_b: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two means with these standard errors."""
    va, vb = se_a**2, se_b**2
    denom = (va**2 / df_a if df_a > 0 else 0.0) + (vb**2 / df_b if df_b > 0 else 0.0)
    return (va + vb) ** 2 / denom if denom > 0 else math.nan


def _diff_t(a: dict, b: dict) -> tuple[float, float]:
    """(standard error, Student's t at 95 %) of ``log(a / b)``: Welch-Satterthwaite degrees of freedom, or the one
    estimate's when both borrow the same configuration's spread."""
    se = math.hypot(float(a["rel_se"]), float(b["rel_se"]))
    shared = a.get("noise_of") is not None and a.get("noise_of") == b.get("noise_of")
    df = float(a["df"]) if shared else welch_df(float(a["rel_se"]), float(a["df"]), float(b["rel_se"]),
                                                   float(b["df"]))
    return se, t_quantile(df)


def separated(a: dict, b: dict) -> bool:
    """Whether configurations ``a`` and ``b`` (rows of ``aggregate``: ``value``, ``rel_se``, ``df``, ``noise_of``)
    differ beyond noise: the 95 % interval of ``log(a / b)`` excludes 0. False where either has no noise estimate."""
    if not (a["value"] > 0 and b["value"] > 0):
        return False
    se, tq = _diff_t(a, b)
    return bool(math.isfinite(se) and math.isfinite(tq)) and abs(math.log(a["value"] / b["value"])) > tq * se


def ratio_interval(a: dict, b: dict) -> tuple[float, float, float]:
    """``a / b`` with the 95 % interval ``separated`` decides by (it excludes 1 exactly when they are separated);
    NaN ends without a noise estimate."""
    r = float(a["value"]) / float(b["value"])
    se, tq = _diff_t(a, b)
    half = tq * se
    return (r, r * math.exp(-half), r * math.exp(half)) if math.isfinite(half) else (r, math.nan, math.nan)


def applied_interval(a: dict, b: dict) -> tuple[float, float]:
    """The 95 % range of the speed-up ``a / b`` that timing each configuration once more shows (the recipe applied
    to one's own script): the prediction interval of ``log(a / b)``, each side's trial-to-trial spread counted
    beside its mean's standard error (``rel_se**2 * (n + 1)``: a mean of ``n`` and one new measurement). Wider than
    ``ratio_interval``, which bounds the speed-up of the means. NaN ends without a noise estimate."""
    if not (a["value"] > 0 and b["value"] > 0):
        return math.nan, math.nan
    r = float(a["value"]) / float(b["value"])
    _se, tq = _diff_t(a, b)
    var = sum(float(x["rel_se"]) ** 2 * (float(x.get("n") or 1) + 1) for x in (a, b))
    half = tq * math.sqrt(var)
    return (r * math.exp(-half), r * math.exp(half)) if math.isfinite(half) else (math.nan, math.nan)


def tie_ranks(lo: np.ndarray, hi: np.ndarray, maximize: bool = True) -> np.ndarray:
    """1 + the number of entries ahead of each entry beyond noise (intervals disjoint)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if not maximize:
        lo, hi = -hi, -lo
    ahead = len(lo) - np.searchsorted(np.sort(lo), hi, side="right")
    return 1 + ahead


def group_ranks(
    value: np.ndarray, lo: np.ndarray, hi: np.ndarray, apart: Callable[[int, int], bool] | None = None
) -> np.ndarray:
    """Ranks for entries listed by ``value``, best (largest) first: a run of entries within noise of the run's
    first entry shares that entry's position as its rank; the next entry beyond noise starts a new run. So the
    listed order never contradicts the values, and ties read as groups (1, 1, 3, 4, 4 ...). Within noise:
    ``apart(leader, i)`` is False (positions in the input), else (no test given) the intervals overlap. An entry
    without an interval starts a run of its own. Returned in the input's order."""
    value, lo, hi = (np.asarray(x, float) for x in (value, lo, hi))
    order = np.argsort(-np.nan_to_num(value, nan=-np.inf), kind="stable")
    ranks = np.zeros(len(value), dtype=int)
    leader, rank = -1, 0
    for position, i in enumerate(order, start=1):
        if apart is not None:
            within = leader >= 0 and not apart(leader, i)
        else:
            within = leader >= 0 and bool(hi[i] >= lo[leader])
        if not within:  # beyond noise of the run's leader (or no interval): new run
            rank, leader = position, i
        ranks[i] = rank
    return ranks


def rank_configs(configs: pd.DataFrame) -> pd.DataFrame:
    """Adds ``rank`` (a run of configurations within noise of the run's best shares it, see ``group_ranks`` and
    ``separated``), ``tied`` (another configuration has the same rank) and ``rank_memory``; sorted by value, best
    first."""
    out = configs.copy()
    cols = ["value", "rel_se", "df", "noise_of"]
    records = out[cols].to_dict("records") if "df" in out else []
    apart = (lambda i, j: separated(records[i], records[j])) if records else None
    out["rank"] = group_ranks(out["value"].to_numpy(), out["lo"].to_numpy(), out["hi"].to_numpy(), apart)
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


def ratio(
    value: pd.Series | float,
    rel_se: pd.Series | float,
    t: pd.Series | float,
    ref_value: float,
    ref_rel_se: float,
    ref_t: float,
) -> tuple:
    """``value / ref_value`` with its interval (relative errors add in quadrature on the log scale)."""
    r = value / ref_value
    se = np.sqrt(np.square(rel_se) + ref_rel_se**2)
    tq = np.fmax(t, ref_t)
    half = np.nan_to_num(tq * se)
    return r, r * np.exp(-half), r * np.exp(half)


def disjoint_below(lo_a: float, hi_a: float, lo_b: float, hi_b: float) -> bool:
    """True when interval a lies entirely below interval b (a is worse than b beyond noise)."""
    return bool(hi_a < lo_b) if all(map(math.isfinite, (hi_a, lo_b))) else False
