"""Knob importance (Optuna's evaluators on an in-memory study rebuilt from the rows) and marginal effects.

Each configuration becomes one trial of the in-memory study (its mean over repeats), and the objective the log of
the metric: a knob that doubles throughput counts the same at any scale. Each swept knob keeps the distribution
its sweep declared, as the rows record it (``space``): an integer or float knob (``range``, ``interval``,
``tag(log, ...)``) is numeric, so fANOVA splits it at thresholds instead of one-hot encoding hundreds of
values; a ``choice`` knob, one inactive in some configurations (``null``) or one from rows that record no space
is categorical (values as the report spells them). The cost is bounded: at most MAX_TRIALS configurations (a
seeded sample, then fitted with half of FANOVA_TREES trees), numeric knobs binned to MAX_CATEGORIES levels, and a
categorical knob with more than MAX_CATEGORIES values that are all numbers is treated as ordered numbers.
fANOVA (a random forest, needs scikit-learn) is the default; PED-ANOVA is used when scikit-learn is missing or
when asked for. On sweeps of tens of configurations PED-ANOVA's top-quantile estimate is unstable, which is
why fANOVA comes first.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    json_to_distribution,
)

from sweeper.report.data import short_name, value_order
from sweeper.report.stats import separated

MAX_TRIALS = 128  # larger studies are subsampled (seeded) before fitting, the report says so: fANOVA grows with them
FANOVA_TREES = 16  # Optuna's default is 64; on these sweeps 16 ranks knobs the same at a quarter of the time
MAX_CATEGORIES = 32  # beyond this, a knob of numbers is fitted as a number (fANOVA's cost grows with categories)
EVALUATORS = ("auto", "fanova", "ped-anova")
SPACE_COLUMN = "space"


def recorded_space(rows: pd.DataFrame) -> dict[str, BaseDistribution]:
    """``{column: distribution}`` from the rows' ``space`` records (every record of the study, later ones win)."""
    if SPACE_COLUMN not in rows:
        return {}
    out: dict[str, BaseDistribution] = {}
    for text in rows[SPACE_COLUMN].dropna().astype(str).unique():
        try:
            out.update({col: json_to_distribution(d if isinstance(d, str) else json.dumps(d))
                        for col, d in json.loads(text).items()})
        except (ValueError, TypeError, KeyError):
            continue  # a record this version cannot read: that knob stays categorical
    return out


def _numbers(column: pd.Series) -> np.ndarray | None:
    try:
        return column.astype(float).to_numpy()
    except (TypeError, ValueError):
        return None


def _binned(numbers: np.ndarray, log: bool) -> np.ndarray:
    """Each value replaced by the median of its quantile bin (MAX_CATEGORIES bins): fANOVA's cost grows with the
    distinct split points of a feature, and 32 ordered levels keep the knob's effect."""
    edges = np.unique(np.quantile(np.log(numbers) if log and (numbers > 0).all() else numbers,
                                  np.linspace(0, 1, MAX_CATEGORIES + 1)))
    keys = np.log(numbers) if log and (numbers > 0).all() else numbers
    bins = np.clip(np.searchsorted(edges, keys, side="right") - 1, 0, len(edges) - 2)
    out = numbers.astype(float).copy()
    for b in np.unique(bins):
        out[bins == b] = np.median(numbers[bins == b])
    return np.round(out) if (numbers == np.round(numbers)).all() else out


def _distribution(column: pd.Series, declared: BaseDistribution | None) -> tuple[BaseDistribution, list]:
    """The distribution a knob is fitted with and its values per configuration (see the module docstring)."""
    numbers = _numbers(column)  # None when a value is not a number, "null" included
    numeric = isinstance(declared, (IntDistribution, FloatDistribution)) or (
        numbers is not None and column.nunique() > MAX_CATEGORIES)
    if numeric and numbers is not None and np.isfinite(numbers).all():
        if len(np.unique(numbers)) > MAX_CATEGORIES:
            numbers = _binned(numbers, bool(getattr(declared, "log", False)))
        low, high = float(numbers.min()), float(numbers.max())
        log = bool(getattr(declared, "log", False)) and low > 0
        if (isinstance(declared, IntDistribution) or declared is None) and (numbers == np.round(numbers)).all():
            return IntDistribution(int(low), int(high), log=log), [int(v) for v in numbers]
        return FloatDistribution(low, high, log=log), [float(v) for v in numbers]
    return CategoricalDistribution(sorted(column.unique())), list(column)


def has_sklearn() -> bool:
    try:
        import sklearn.ensemble  # noqa: F401
    except ImportError:
        return False
    return True


def _evaluator(name: str, trees: int = FANOVA_TREES):
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator

    if name == "auto":
        name = "fanova" if has_sklearn() else "ped-anova"
    if name == "fanova":
        return FanovaImportanceEvaluator(n_trees=trees, seed=0), "fANOVA"
    return PedAnovaImportanceEvaluator(), "PED-ANOVA"


# Importance only from enough configurations: at least this many, and this many per knob that varies (the JPEG
# sweep's 5 configurations of 15 knobs gave one knob 0.25 of the importance: noise read as an effect).
MIN_CONFIGS, MIN_PER_KNOB = 6, 2


def importance(values: pd.DataFrame, target: pd.Series, direction: str = "maximize",
               evaluator: str = "auto", space: dict[str, BaseDistribution] | None = None
               ) -> tuple[dict[str, float], str]:
    """Importance of each column of ``values`` (normalized knob values, one row per configuration) for
    ``target`` (the metric per configuration), each knob with its declared distribution from ``space``
    (``recorded_space``). Returns ({short knob name: importance}, note); empty when it cannot be computed, with
    the reason in the note."""
    import optuna

    ok = target.notna() & (target > 0)
    values, target = values[ok], target[ok]
    cols = [c for c in values.columns if values[c].nunique() > 1]
    need = max(MIN_CONFIGS, MIN_PER_KNOB * len(cols))
    if len(values) < need or not cols:
        return {}, (f"too few configurations for it: {len(values)} measured, need {need} (at least {MIN_CONFIGS}, and "
                    f"{MIN_PER_KNOB} per knob that varies: {len(cols)}); from fewer, noise reads as importance")
    note = ""
    if len(values) > MAX_TRIALS:
        pick = np.random.default_rng(0).choice(len(values), MAX_TRIALS, replace=False)
        values, target = values.iloc[np.sort(pick)], target.iloc[np.sort(pick)]
        note = f"; fitted on a seeded sample of {MAX_TRIALS} configurations, {FANOVA_TREES // 2} trees"
    fitted = {c: _distribution(values[c], (space or {}).get(c)) for c in cols}
    dists = {c: d for c, (d, _) in fitted.items()}
    logs = np.log(target.to_numpy(float))
    trials = [optuna.trial.create_trial(params={c: fitted[c][1][i] for c in cols}, distributions=dists,
                                        values=[float(v)])
              for i, v in enumerate(logs)]
    # A sampled (large) study gets half the trees: its cost is what a report over thousands of configurations pays.
    evaluator_obj, name = _evaluator(evaluator, FANOVA_TREES // 2 if note else FANOVA_TREES)
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(direction=direction)
        study.add_trials(trials)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PED-ANOVA is marked experimental
            result = optuna.importance.get_param_importances(study, evaluator=evaluator_obj)
    except (RuntimeError, ValueError) as e:
        return {}, f"{name} could not be computed: {e}"
    finally:
        optuna.logging.set_verbosity(previous)
    return {short_name(k): float(v) for k, v in result.items()}, (
        f"{name} on log {target.name or 'metric'}, {len(values)} configurations{note}"
    )


def marginals(configs: pd.DataFrame, values: pd.DataFrame, swept: list[str]) -> pd.DataFrame:
    """Per swept knob and value: configurations, trials, mean and best of the configurations' mean metric, the
    mean relative to the knob's best value (1.0 = the best value of that knob), and ``one_knob``: the configuration
    equal to the best (``configs``' first row) but for this knob's value, relative to the best, where it was
    measured (``one_knob_apart``: beyond noise of the best), which a mean over other knobs' values can contradict."""
    columns = ["knob", "value", "configs", "trials", "mean", "best", "vs_best_value", "one_knob", "one_knob_apart"]
    parts = []
    best_key = configs.index[0] if len(configs) else None
    with_noise = {"rel_se", "df"} <= set(configs.columns)
    for col in swept:
        frame = pd.DataFrame({"value": values[col], "mean": configs["value"], "n": configs["n"]})
        g = frame.groupby("value", sort=False)
        per = pd.DataFrame({"configs": g.size(), "trials": g["n"].sum(), "mean": g["mean"].mean(),
                            "best": g["mean"].max()})
        per = per.loc[sorted(per.index, key=value_order(per.index))]  # 32, 64, 128, 256: not as text
        per = per.astype({"configs": int, "trials": int}).rename_axis("value").reset_index()
        top = per["mean"].max()
        per["vs_best_value"] = per["mean"] / top if top else np.nan
        per["knob"] = short_name(col)
        per["one_knob"], per["one_knob_apart"] = np.nan, None
        if best_key is not None:
            others = [c for c in swept if c != col]
            same = (values[others] == values.loc[best_key, others]).all(axis=1) if others else \
                pd.Series(True, index=values.index)
            neighbours = values.index[same.to_numpy()]
            by_value = {values.loc[k, col]: k for k in neighbours}
            for i, v in per["value"].items():
                k = by_value.get(v)
                if k is None:
                    continue
                per.loc[i, "one_knob"] = configs.loc[k, "value"] / configs.loc[best_key, "value"]
                if with_noise and k != best_key:
                    per.at[i, "one_knob_apart"] = separated(configs.loc[k], configs.loc[best_key])
        parts.append(per)
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
