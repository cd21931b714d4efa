"""Knob importance (Optuna's evaluators on an in-memory study rebuilt from the rows) and marginal effects.

Each configuration becomes one trial of the in-memory study (its mean over repeats), every swept knob a
categorical parameter (values as the report spells them; ``null`` for a knob inactive under its condition),
and the objective the log of the metric: a knob that doubles throughput counts the same at any scale.
fANOVA (a random forest, needs scikit-learn) is the default; PED-ANOVA is used when scikit-learn is missing or
when asked for. On sweeps of tens of configurations PED-ANOVA's top-quantile estimate is unstable, which is
why fANOVA comes first.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from sweeper.report.data import short_name, value_order

MAX_TRIALS = 2000  # larger studies are subsampled (seeded) before fitting; the report says so
FANOVA_TREES = 16  # Optuna's default is 64; on these sweeps 16 ranks knobs the same at a quarter of the time
EVALUATORS = ("auto", "fanova", "ped-anova")


def has_sklearn() -> bool:
    try:
        import sklearn.ensemble  # noqa: F401
    except ImportError:
        return False
    return True


def _evaluator(name: str):
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator

    if name == "auto":
        name = "fanova" if has_sklearn() else "ped-anova"
    if name == "fanova":
        return FanovaImportanceEvaluator(n_trees=FANOVA_TREES, seed=0), "fANOVA"
    return PedAnovaImportanceEvaluator(), "PED-ANOVA"


def importance(values: pd.DataFrame, target: pd.Series, direction: str = "maximize",
               evaluator: str = "auto") -> tuple[dict[str, float], str]:
    """Importance of each column of ``values`` (normalized knob values, one row per configuration) for
    ``target`` (the metric per configuration). Returns ({short knob name: importance}, note); empty when it cannot
    be computed, with the reason in the note."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    ok = target.notna() & (target > 0)
    values, target = values[ok], target[ok]
    cols = [c for c in values.columns if values[c].nunique() > 1]
    if len(values) < 4 or not cols:
        return {}, "too few configurations (need 4 with a swept knob that varies)"
    note = ""
    if len(values) > MAX_TRIALS:
        pick = np.random.default_rng(0).choice(len(values), MAX_TRIALS, replace=False)
        values, target = values.iloc[np.sort(pick)], target.iloc[np.sort(pick)]
        note = f"; fitted on a seeded sample of {MAX_TRIALS} configurations"
    dists = {c: CategoricalDistribution(sorted(values[c].unique())) for c in cols}
    logs = np.log(target.to_numpy(float))
    trials = [optuna.trial.create_trial(params={c: row[c] for c in cols}, distributions=dists, values=[float(v)])
              for row, v in zip(values[cols].to_dict("records"), logs)]
    evaluator_obj, name = _evaluator(evaluator)
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
    return {short_name(k): float(v) for k, v in result.items()}, f"{name} on log {target.name or 'metric'}{note}"


def marginals(configs: pd.DataFrame, values: pd.DataFrame, swept: list[str]) -> pd.DataFrame:
    """Per swept knob and value: configurations, trials, mean and best of the configurations' mean metric, and
    the mean relative to the knob's best value (1.0 = the best value of that knob)."""
    rows = []
    for col in swept:
        frame = pd.DataFrame({"value": values[col], "mean": configs["value"], "n": configs["n"]})
        g = frame.groupby("value", sort=False)
        per = pd.DataFrame({"configs": g.size(), "trials": g["n"].sum(), "mean": g["mean"].mean(),
                            "best": g["mean"].max()})
        per = per.loc[sorted(per.index, key=value_order(per.index))]  # 32, 64, 128, 256: not as text
        top = per["mean"].max()
        for value, r in per.iterrows():
            rows.append({"knob": short_name(col), "value": value, "configs": int(r["configs"]),
                         "trials": int(r["trials"]), "mean": r["mean"], "best": r["best"],
                         "vs_best_value": r["mean"] / top if top else np.nan})
    return pd.DataFrame(rows, columns=["knob", "value", "configs", "trials", "mean", "best", "vs_best_value"])
