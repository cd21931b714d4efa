"""Blocks of one analysed study: headline, rankings, importance, marginal effects, failures, plots."""

from __future__ import annotations

import pandas as pd

from sweeper.report import plots
from sweeper.report.analysis import Analysis
from sweeper.report.blocks import (
    Block,
    Contents,
    Heading,
    Para,
    Plot,
    Table,
    first_line,
    interval,
    mib,
    num,
    pct,
    times,
)
from sweeper.report.data import short_name
from sweeper.report.diagnose import BUSY_UTIL, COMPUTE_MFU, DATA_WAIT, HOST_STEP, LAUNCH_UTIL
from sweeper.report.profile_section import profile_blocks

MAX_MARGINAL_PLOTS = 4
MAX_UNSTABLE_NOTES = 5  # lines naming configurations whose step times were unstable; more are counted
UNSTABLE = "†"  # beside a configuration whose step times were unstable (see ``stability_notes``)


def study_blocks(a: Analysis, limit: int, with_plots: bool = True) -> list[Block]:
    out: list[Block] = [Heading(a.title, 2)]
    out.append(
        Para(
            "Trials: "
            + ", ".join(f"{k} {v}" for k, v in sorted(a.counts.items()))
            + (f". Ran on {'; '.join(a.machines)}." if a.machines else "."),
            "note",
        )
    )
    out += [Para(f"Not ranked: {why}.", "alert") for why in a.not_ranked]
    if a.configs.empty:
        out.append(Para(f"Nothing to rank: {a.why_empty or 'no measured row'}.", "alert"))
        out += failures(a)
        return out
    out.append(Para(headline(a)))
    out.append(Para(a.baseline_note, "note"))
    out.append(ranking(a, limit))
    out += legend(a, limit)
    out += stability_notes(a, limit)
    out.append(memory_ranking(a, min(limit, 10)))
    if a.mfu_peaks:
        out.append(
            Para(f"MFU is achieved FLOP/s over the peak of the math that ran: {'; '.join(a.mfu_peaks)}.", "note")
        )
    out += profile_blocks(a, with_plots)
    if with_plots:
        out.append(Plot("Throughput vs peak memory", plots.throughput_vs_memory(a)))
    out += importance_blocks(a, with_plots)
    if with_plots and len(a.history) > 1:
        out.append(Plot("Optimization history", plots.history(a)))
    out += failures(a)
    return out


def summary_blocks(analyses: list[Analysis]) -> list[Block]:
    """For a page of several studies: links to every section, and one line per study (its best configuration)."""
    rows = []
    for a in analyses:
        trials = str(sum(a.counts.values()))
        if a.configs.empty:
            rows.append(
                [a.study, a.workload, trials, f"(nothing ranked: {a.why_empty or 'no measured row'})", "-", "-", "-"]
            )
            continue
        best = a.configs.iloc[0]
        tied = int((a.configs["rank"] == best["rank"]).sum()) - 1
        rows.append(
            [
                a.study,
                a.workload,
                trials,
                best["name"] if best["name"] == best["label"] else f"{best['name']} (see its section)",
                f"{num(best['value'])} {a.unit}",
                times(best["speedup"]) + (" (uncertain)" if a.doubt() and times(best["speedup"]) != "-" else ""),
                str(tied),
            ]
        )
    return [
        Contents(),
        Table(
            "Summary: the best configuration of each study",
            ["study", "workload", "trials", "best configuration", "throughput", "vs baseline", "tied with"],
            rows,
            align="llrlrrr",
            brief=[0, 3, 4, 5, 1, 2, 6],
            note="Each study's section below has its ranking, noise and importance.",
        ),
    ]


def headline(a: Analysis) -> str:
    c = a.configs
    best = c.iloc[0]
    tied = int((c["rank"] == best["rank"]).sum()) - 1
    text = f"Best: {best['label']}: {num(best['value'])} {a.unit} (95% CI {interval(best['lo'], best['hi'])})"
    if pd.notna(best["speedup"]):
        text += f", {times(best['speedup'])} baseline"
    if a.doubt():  # every measurement of the best (or of the baseline) unstable: no certainty claimed
        what = "the speed-up is uncertain" if pd.notna(best["speedup"]) and not best["is_baseline"] else "uncertain"
        return text + f"; {what}: {a.doubt()}."
    if not a.noise_measured:  # "beyond noise" only where trial-to-trial noise was measured
        return text + "; measured once; no noise estimate."
    if len(c) == 1:
        return text + "; the only configuration measured."
    text += "; " + (
        f"tied within noise with {tied} other configuration{'s' * (tied != 1)}."
        if tied
        else "ahead of every other configuration beyond noise."
    )
    return text


def ranking(a: Analysis, limit: int) -> Table:
    c = a.configs
    knobs = a.swept
    header = [
        "#",
        "tie",
        "configuration",
        f"throughput ({a.unit})",
        "95% CI",
        "n",
        "vs baseline",
        "peak mem (MiB)",
        "mem #",
        "pareto",
        "diagnosis",
        "data wait",
        "gpu util",
        "mfu",
        "step p50 (ms)",
        "step cv",
        "trials",
    ] + [short_name(k) for k in knobs]
    rows = [_ranking_row(r, knobs) for _, r in c.head(limit).iterrows()]
    marks = [
        "baseline" if r["is_baseline"] else ("best" if r["rank"] == 1 else "") for _, r in c.head(limit).iterrows()
    ]
    return Table(
        "Ranking by throughput",
        header,
        rows,
        align="rllrrrrrrllrrrrrl" + "l" * len(knobs),
        note=_ranking_note(a, limit),
        marks=marks,
        more=max(0, len(c) - limit),
        brief=[0, 2, 3, 6, 4, 7, 10, 1, 9, 5],
        page=list(range(len(header) - len(knobs))),
        brief_cells={2: [b + _mark(r) for b, (_, r) in zip(c["label_brief"], c.head(limit).iterrows())]}
        if "label_brief" in c
        else {},
    )  # the label names the configuration; .md has a column per knob


def _ranking_row(r: pd.Series, knobs: list[str]) -> list[str]:
    """One configuration's row of the ranking, its swept knobs' values last."""
    vs = "baseline" if r["is_baseline"] else times(r["speedup"], r["speedup_lo"], r["speedup_hi"])
    return [
        str(int(r["rank"])),
        "tied" if r["tied"] else "",
        r["name"] + _mark(r),
        num(r["value"]),
        interval(r["lo"], r["hi"]),
        str(int(r["n"])),
        vs,
        mib(r["peak_mem_bytes"]),
        _rank(r["rank_memory"]),
        "*" if r["pareto"] else "",
        r["diagnosis"],
        pct(r["data_wait_frac"]),
        num(r["gpu_util_mean"], 3),
        num(r["mfu"], 3),
        num(r["step_ms_p50"]),
        num(r["step_cv"], 3),
        r["trials"],
    ] + [_shown(r[f"v:{k}"]) for k in knobs]


def _ranking_note(a: Analysis, limit: int) -> str:
    """What the ranking's ranks, noise, Pareto front, diagnosis and marks mean for this study."""
    c = a.configs
    return (
        f"Listed by throughput; configurations within noise of the best of their group (95% intervals "
        f"overlapping its interval) share its rank, marked `tied`. Noise: "
        f"{noise_text(a)}. Pareto: {' / '.join(f'{m} ({d})' for m, d in pareto_objectives(a))}. "
        f"Diagnosis: data-bound if data wait >= {DATA_WAIT:.0%}; compute-bound if MFU >= {COMPUTE_MFU}; "
        f"launch-bound if GPU util < {LAUNCH_UTIL:.0f}% (or < {BUSY_UTIL:.0f}% with the host launching steps >= "
        f"{HOST_STEP:.0%} of the time); memory-bound if busy below that MFU; n/a without "
        f"GPU counters."
        + (
            " Profiled configurations: named from their profile (see 'Why the GPU idles'); the rule is the "
            "fallback, marked (rule)."
            if not a.profiles.empty
            else ""
        )
        + (
            f" {UNSTABLE} step times unstable (two speeds, or a CV over 0.5: the signature of a shared CPU); the "
            "sweep measures such a configuration again once (hydra.sweeper.confirm_unstable)."
            if any(_mark(r) for _, r in c.head(limit).iterrows())
            else ""
        )
    )


MAX_LEGEND = 50  # configurations a legend spells out (the Markdown ranking's rows)


def legend(a: Analysis, limit: int) -> list[Block]:
    """``C1 = bf16 + channels_last + ...``: the long labels tables show as a name (``analysis.short_names``)."""
    shown = a.configs.head(min(limit, MAX_LEGEND))
    named = shown[shown["name"] != shown["label"]]
    return [Para(f"{r['name']} = {r['label']}", "note") for _, r in named.iterrows()]


def _mark(r: pd.Series) -> str:
    return f" {UNSTABLE}" if r.get("stability") else ""


def stability_notes(a: Analysis, limit: int) -> list[Block]:
    """One line per configuration of the ranking marked unstable (the first ``MAX_UNSTABLE_NOTES``)."""
    flagged = [r for _, r in a.configs.head(limit).iterrows() if r.get("stability")]
    out: list[Block] = [
        Para(f"{UNSTABLE} {r['label']}: {r['stability']}.", "note") for r in flagged[:MAX_UNSTABLE_NOTES]
    ]
    if len(flagged) > MAX_UNSTABLE_NOTES:
        out.append(
            Para(
                f"{UNSTABLE} ... and {len(flagged) - MAX_UNSTABLE_NOTES} more configurations of the ranking (marked).",
                "note",
            )
        )
    return out


def _rank(value: object) -> str:
    return "-" if pd.isna(value) else str(int(value))


def _shown(value: object, null: str = "-") -> str:
    """A normalized knob value for display; ``null`` (inactive under its condition) as ``null``."""
    return null if value == "null" else str(value)


def noise_text(a: Analysis) -> str:
    spread = a.configs.attrs.get("spread_range")
    repeated = int(a.configs.attrs.get("repeated") or 0)
    if spread:
        lo, hi = spread
        between = pct(lo, 1) if pct(lo, 1) == pct(hi, 1) else f"{pct(lo, 1)} to {pct(hi, 1)}"
        return (
            f"{repeated} configuration{'s' * (repeated != 1)} measured more than once, with a between-trial spread of "
            f"{between} per trial: each uses its own spread; one measured once uses the widest spread of the "
            "repeated ones alike to it (data-bound or not), or, none alike repeated, its step times only (they "
            "miss trial-to-trial noise); each uses the larger of that and its own step-time noise, with Student's t "
            "of the spread's degrees of freedom; two are ranked apart only where the interval of their ratio "
            "excludes 1"
        )
    return (
        "no repeated configurations, so intervals come from each trial's step times only (they miss "
        "trial-to-trial noise: use confirm_top_k or repeat=true to measure it)"
    )


def pareto_objectives(a: Analysis) -> list[tuple[str, str]]:
    return a.objectives if len(a.objectives) > 1 else [("throughput", "maximize"), ("peak_mem_bytes", "minimize")]


def memory_ranking(a: Analysis, limit: int) -> Table:
    c = a.configs.sort_values(["rank_memory", "value"], ascending=[True, False])
    rows = [
        [
            _rank(r["rank_memory"]),
            r["name"],
            mib(r["peak_mem_bytes"]),
            num(r["value"]),
            str(int(r["rank"])),
            "*" if r["pareto"] else "",
        ]
        for _, r in c.head(limit).iterrows()
    ]
    return Table(
        "Ranking by peak memory",
        ["mem #", "configuration", "peak mem (MiB)", f"throughput ({a.unit})", "#", "pareto"],
        rows,
        align="rlrrrl",
        note="On the CPU peak memory is the process's peak RSS, torch itself included: the recipe never trades "
        "speed for it."
        if a.device_mem_bytes is None and any(m.startswith("cpu:") for m in a.machines)
        else "",
        more=max(0, len(c) - limit),
    )


def importance_blocks(a: Analysis, with_plots: bool) -> list[Block]:
    out: list[Block] = []
    if a.importance:
        metrics = list(a.importance)
        knobs = sorted(a.importance[metrics[0]], key=a.importance[metrics[0]].get, reverse=True)
        rows = [[k] + [num(a.importance[m].get(k, float("nan")), 3) for m in metrics] for k in knobs]
        out.append(
            Table(
                "Knob importance",
                ["knob"] + [f"importance ({m})" for m in metrics],
                rows,
                note=f"{a.importance_note}; importances of one metric sum to 1.",
            )
        )
        if with_plots:
            out.append(Plot("Knob importance", plots.importance_bars(a)))
    elif a.swept:
        out.append(Para(f"Knob importance: {a.importance_note}.", "note"))
    if not a.marginals.empty:
        m = a.marginals
        rows = [
            [
                r["knob"],
                _shown(r["value"], "(inactive)"),
                str(r["configs"]),
                str(r["trials"]),
                num(r["mean"]),
                times(r["vs_best_value"]),
                _one_knob(r),
            ]
            for _, r in m.iterrows()
        ]
        out.append(
            Table(
                "Effect of each knob",
                [
                    "knob",
                    "value",
                    "configs",
                    "trials",
                    f"mean ({a.unit})",
                    "mean vs best value",
                    "vs #1, this knob only",
                ],
                rows,
                align="llrrrrl",
                note="vs #1, this knob only = the configuration equal to the best (#1) but for this knob's value, "
                "over the best, where it was measured (within / beyond noise): the knob's own effect. mean = mean "
                "over the configurations with that value (each counted once), over the mean of the knob's best "
                "value: other knobs' values mix into it, so it can contradict the one-knob change.",
            )
        )
        if with_plots:
            order = list(a.importance.get("throughput", {})) or list(dict.fromkeys(m["knob"]))
            order = [k for k in order if (m["knob"] == k).sum() > 1]  # a knob seen at one value has no effect
            for knob in order[:MAX_MARGINAL_PLOTS]:
                out.append(Plot(f"Throughput per value of {knob}", plots.marginal(a, knob)))
    return out


def _one_knob(r: pd.Series) -> str:
    """``#1`` for the best's own value, ``0.83x beyond noise``, ``0.98x within noise``, ``-`` where not measured."""
    if pd.isna(r["one_knob"]):
        return "-"
    if r["one_knob_apart"] is None:
        return "#1" if r["one_knob"] == 1.0 else times(r["one_knob"])
    return f"{times(r['one_knob'])} {'beyond' if r['one_knob_apart'] else 'within'} noise"


def failures(a: Analysis) -> list[Block]:
    f = a.failures
    if f.empty:
        return []
    rows = [
        [f"{a.study}/{r.get('trial', '-')}", str(r["status"]), str(r.get("reason", "")), first_line(r.get("message"))]
        for r in f.to_dict("records")
    ]
    return [Table("Failed and infeasible trials", ["study/trial", "status", "reason", "message"], rows, align="llll")]
