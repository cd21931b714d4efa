"""Does a default sweep keep its wall-clock budget and still reach the ceiling? One case per GPU run.

    python bench/budget_sweep.py OUT --case CASE [--budget 300] [--safety 120] [--smoke] [Hydra overrides ...]
    python bench/budget_sweep.py [TABLE.md] --table DIR [DIR ...]

Cases: resnet50, jpeg, transformer (shipped workloads); vit (bench/own_model) and the zoo, models the project does
not ship, each an own workload written from the README (bench/zoo/conf/workload/zoo_<model>.yaml and
bench/zoo/zoo_<model>.py): convnext (CNN), gpt (decoder language model), lstm (recurrent language model), seg
(segmentation network fed by a DataLoader).

Each case: the independent hand-written loop of the same model where the case has one (``bench/hand_loop.py`` for
ResNet-50 on synthetic data, also the jpeg case's reference, ``bench/own_model/hand_vit.py`` for the ViT-B/16,
``bench/zoo/hand_zoo.py --model <m>`` for the zoo: the handbook applied by hand, in its own inductor cache; the jpeg
case decodes real photographs, ``bench/photo_corpus.py``), then the default sweep ``python -m sweeper +workload=<w> -m
hydra.sweeper.timeout_s=<budget>`` (no ``n_trials``: the budget is the only limit) with NO outer timeout of ours
(a safety SIGTERM at budget + ``--safety`` s is recorded as a failure of the budget), then the report of its rows.
Its trials share one inductor cache (the sweep's ``compile_cache_dir``, under OUT/results), never the hand loop's.
The summary row says the command's wall time against the budget, the best found against the reference, when the
sweep's best-so-far first reached 0.99 of the reference (and of its own final best), the share of the budget used,
how many trials' predicted wall times (``predicted_wall_s``, at launch) were within 30 % of their ``wall_s``, and
the sweep's own "sweep ended: ..." and "cost model: ..." lines.

``--smoke`` (a CPU check of the script): the sweep at ``preset=tiny``; the zoo's hand loops run too, on the CPU at
the tiny sizes, eager (``--device cpu --tiny --compile off``), so their ratios mean nothing.

``--table DIR ...`` reads the last summary of every budget-<case>.jsonl under the folders (one per GPU run) and
writes ONE markdown table (to TABLE.md when given, and to stdout): case, model, hand loop, best found, best / hand,
time to 0.99 of the sweep's own final best and of the hand loop, ended at against the budget, budget used, the share
of trials whose predicted wall was within ±30 % of the actual (the sweep's own "cost model:" count, whose actual is
a trial's cost from launch to end as the sweeper saw it; the rows' ``wall_s`` starts later, after the trial
process did, so the share over the rows is shown, marked "rows", only where that line is missing), the median
error, trials; then each sweep's end and cost lines.

On the H200 (one run of the GPU machine per case: ~30 s of installs + a hand loop of at most 200 s, 250 s for seg
with ``--safety 30``, + the 300 s sweep + the report, inside 600 s; the machine's image has PyTorch but not Hydra
and Optuna, which travel as wheels).
Once, in the checkout: the wheels of hydra-core 1.3.8, omegaconf 2.3.1, antlr4-python3-runtime 4.9.3 (built
with ``pip wheel``: it has no wheel), optuna 5.0.0, alembic, sqlalchemy, colorlog, mako and plotly for the image's
Python (``pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 ...``)
in .whl/, kept out of git. Then, on the GPU machine, in a copy of the checkout that holds .whl/, for each CASE
in convnext gpt lstm seg vit (and resnet50, jpeg), one run (600 s at most) of

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 && \
      OUT=<a folder that comes back> bash bench/budget_call.sh CASE --budget 300 --safety 60

(do not export TORCHINDUCTOR_CACHE_DIR: the hand loop and the sweep keep their own caches). Then, over the folders
the runs' files came back to:

    python bench/budget_sweep.py zoo-table.md --table OUT_CONVNEXT OUT_GPT OUT_LSTM OUT_SEG OUT_VIT

Files in OUT: budget-<case>.jsonl (hand loop, sweep, summary), hand-<case>.jsonl, sweep-<case>.log,
report-<case>.md/.txt, rows-<case>.parquet (every trial row, bench/pack.py), results/ (the sweep's folder).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
CASES: dict[str, dict[str, Any]] = {
    "resnet50": {"args": ["+workload=resnet50"], "metric": "throughput", "unit": "img/s", "kind": "CNN (shipped)",
                 "hand": ["bench/hand_loop.py", "--precision", "fp16", "--batch", "1024", "--zero-init"]},
    "jpeg": {"args": ["+workload=resnet50", "workload.data=jpeg"], "metric": "throughput", "unit": "img/s",
             "kind": "CNN + JPEG pipeline (shipped)",  # its bar is the synthetic hand loop's, run in the same call
             "hand": ["bench/hand_loop.py", "--precision", "fp16", "--batch", "1024", "--zero-init"]},
    "transformer": {"args": ["+workload=transformer_block"], "metric": "mfu", "unit": "MFU",
                    "kind": "transformer blocks (shipped)"},
    "vit": {"args": ["-cd", "bench/own_model/conf", "+workload=vit"], "metric": "throughput", "unit": "img/s",
            "kind": "vision transformer (ViT-B/16)",
            "hand": ["bench/own_model/hand_vit.py", "--batch", "256", "--precision", "bf16"],
            "pythonpath": "bench/own_model", "hand_timeout_s": 200.0},
    # The zoo: models the project does not ship, each an own workload (bench/zoo/conf, bench/zoo/zoo_*.py) written
    # from the README, beside its independent hand loop (bench/zoo/hand_zoo.py: the handbook applied by hand).
    "convnext": {"args": ["-cd", "bench/zoo/conf", "+workload=zoo_convnext"], "metric": "throughput",
                 "unit": "img/s", "kind": "CNN (ConvNeXt-Tiny, 224 px)", "pythonpath": "bench/zoo",
                 "hand": ["bench/zoo/hand_zoo.py", "--model", "convnext", "--batch", "512", "--batch", "256"]},
    "gpt": {"args": ["-cd", "bench/zoo/conf", "+workload=zoo_gpt"], "metric": "throughput", "unit": "tokens/s",
            "kind": "decoder LM (12 x 768, seq 512)", "pythonpath": "bench/zoo",
            "hand": ["bench/zoo/hand_zoo.py", "--model", "gpt", "--batch", "128", "--batch", "64"]},
    "lstm": {"args": ["-cd", "bench/zoo/conf", "+workload=zoo_lstm"], "metric": "throughput", "unit": "tokens/s",
             "kind": "recurrent LM (2-layer LSTM 1024, seq 128)", "pythonpath": "bench/zoo",
             "hand": ["bench/zoo/hand_zoo.py", "--model", "lstm", "--batch", "512", "--batch", "256"]},
    "rec": {"args": ["-cd", "bench/zoo/conf", "+workload=zoo_rec"], "metric": "throughput", "unit": "samples/s",
            "kind": "recommender (DLRM-style, 26 tables x 100k x 64)", "pythonpath": "bench/zoo",
            "hand": ["bench/zoo/hand_zoo.py", "--model", "rec", "--batch", "16384", "--batch", "8192"]},
    "seg": {"args": ["-cd", "bench/zoo/conf", "+workload=zoo_seg"], "metric": "throughput", "unit": "img/s",
            "kind": "segmentation (DeepLabV3-MobileNetV3, 512 px, DataLoader)", "pythonpath": "bench/zoo",
            "hand": ["bench/zoo/hand_zoo.py", "--model", "seg", "--batch", "128", "--batch", "64"]},
}  # fmt: skip
ZOO = ("convnext", "gpt", "lstm", "rec", "seg")
for _name in ZOO:  # --smoke: the hand loop too, on the CPU at the tiny preset's sizes, eager (a CPU compile: minutes)
    CASES[_name]["smoke_hand"] = [*CASES[_name]["hand"][:3], "--device", "cpu", "--tiny", "--compile", "off",
                                  "--seconds", "1"]  # fmt: skip
    CASES[_name]["hand_timeout_s"] = 200.0  # one GPU run: the hand loop, then the sweep, in 600 s
# DeepLabV3's first compiled step took 153 s on an H100 (cuDNN's benchmark in it): its hand loop ran past 200 s.
# With --safety 30 the run still ends inside 600 s: ~30 s of installs + 250 + the 300 s sweep.
CASES["seg"]["hand_timeout_s"] = 250.0
SAFETY_S = 120.0


def log(out: Path, case: str, **row: Any) -> None:
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "case": case, **row}
    with (out / f"budget-{case}.jsonl").open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    print(json.dumps(row, default=str), flush=True)


def env(case: dict[str, Any]) -> dict[str, str]:
    extra = case.get("pythonpath")
    path = os.pathsep.join(p for p in (str(ROOT / extra) if extra else "", os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", **({"PYTHONPATH": path} if path else {})}


def hand_loop(out: Path, name: str, case: dict[str, Any], smoke: bool = False) -> float | None:
    """The hand loop's best samples/s (its own inductor cache: the sweep must not find its kernels compiled)."""
    hand = case.get("smoke_hand") if smoke else case.get("hand")
    if not hand:
        return None
    cmd = [sys.executable, str(ROOT / hand[0]), *hand[1:], "--json", str(out / f"hand-{name}.jsonl")]
    hand_env = {**env(case), "TORCHINDUCTOR_CACHE_DIR": str(out / "hand_inductor_cache")}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=hand_env, capture_output=True, text=True,
                              timeout=case.get("hand_timeout_s", 400.0))  # fmt: skip
    except subprocess.TimeoutExpired as e:
        log(out, name, kind="hand", exit="timeout", rows=[], stderr=str(e)[-300:])
        return None
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    log(out, name, kind="hand", exit=proc.returncode, rows=rows, stderr=proc.stderr[-500:] if proc.returncode else "")
    values = [float(r.get("samples_s") or r.get("img_s")) for r in rows if r.get("samples_s") or r.get("img_s")]
    return max(values) if values else None


def sweep(
    out: Path, name: str, case: dict[str, Any], budget: float, extra: list[str], safety: float = SAFETY_S
) -> tuple[float, float, int]:
    results = out / "results"
    cmd = [sys.executable, "-m", "sweeper", *case["args"], "-m", f"results_dir={results}",
           f"hydra.sweeper.timeout_s={budget:g}", f"hydra.sweep.dir={out / 'sweep'}", *extra]  # fmt: skip
    started = time.time()
    with (out / f"sweep-{name}.log").open("w") as f:  # each line stamped with the seconds since launch
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**env(case), "COLUMNS": "160"})  # fmt: skip

        def copy() -> None:
            for line in proc.stdout:
                f.write(f"{time.time() - started:7.1f} {line}")

        reader = threading.Thread(target=copy, daemon=True)  # a trial's orphan holding the pipe cannot hold us
        reader.start()
        try:
            code = proc.wait(timeout=budget + safety)
        except subprocess.TimeoutExpired:  # the budget was not kept: recorded as such
            proc.send_signal(signal.SIGTERM)
            code = -999
            proc.wait()
        reader.join(timeout=10)
    wall = time.time() - started
    log(out, name, kind="sweep", exit=code, wall_s=round(wall, 1), budget_s=budget,
        within_budget_plus_10=wall <= budget + 10, command=" ".join(cmd[2:]))  # fmt: skip
    return started, wall, code


def curve(rows: pd.DataFrame, started: float, metric: str) -> list[tuple[float, float]]:
    """(seconds after launch, best so far) at each complete trial's end."""
    done = rows[(rows["status"] == "complete") & rows[metric].notna()].copy()
    done["t"] = pd.to_datetime(done["ended_at"], utc=True).map(lambda ts: ts.timestamp() - started)
    best, points = 0.0, []
    for _, r in done.sort_values("t").iterrows():
        if float(r[metric]) > best:
            best = float(r[metric])
            points.append((round(float(r["t"]), 1), best))
    return points


def first_at(points: list[tuple[float, float]], level: float) -> float | None:
    return next((t for t, v in points if v >= level), None)


def sweep_lines(logfile: Path, prefix: str) -> str | None:
    """The sweep's own last line starting with ``prefix`` ("sweep ended:", "cost model:"), from its stamped
    console log, with the lines a narrow console wrapped it onto."""
    if not logfile.exists():
        return None
    text = [re.sub(r"^\s*[\d.]+ ", "", ln) for ln in logfile.read_text(errors="replace").splitlines()]
    starts = [i for i, ln in enumerate(text) if ln.startswith(prefix)]
    if not starts:
        return None
    words = [text[starts[-1]]]
    for ln in text[starts[-1] + 1 :]:
        if not ln.startswith("    "):
            break
        words.append(ln.strip())
    return " ".join(words)


def _num(x: Any, fmt: str = "{:,.0f}") -> str:
    return "–" if x is None else fmt.format(x)


def zoo_table(dirs: list[Path]) -> str:
    """One markdown table from the last summary of each budget-<case>.jsonl under ``dirs`` (one GPU run each)."""
    head = ("| case | model | hand loop | best found | best / hand | ≥ 0.99 of own best at | ≥ 0.99 of hand at "
            "| ended at / budget | budget used | predicted wall within ±30 % (median error) | trials |")  # fmt: skip
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for path in sorted({p for d in dirs for p in (d.glob("**/budget-*.jsonl") if d.is_dir() else [d])}):
        rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip().startswith("{")]
        summaries = [r for r in rows if r.get("kind") == "summary"]
        if not summaries:
            notes.append(f"{path}: no summary row (the run did not finish)")
            continue
        s, case = summaries[-1], summaries[-1].get("case", path.stem.removeprefix("budget-"))
        console = path.parent / f"sweep-{case}.log"  # beside it (bench/budget_call.sh copies both): a summary
        for key, prefix in (("ended", "sweep ended:"), ("cost_line", "cost model:")):  # written without the lines
            if not s.get(key) and console.exists():
                s = {**s, key: sweep_lines(console, prefix)}
        unit = s.get("unit") or CASES.get(case, {}).get("unit") or ""
        model = s.get("model") or CASES.get(case, {}).get("kind") or ""
        # The sweep's own count (its prediction against the trial's cost as the sweeper saw it, launch to end); the
        # rows' wall_s starts after the trial process did, so the rows' figure is the fallback only.
        own = re.search(r"cost model: (\d+) of (\d+) .*?median error ([+-]?\d+)%", s.get("cost_line") or "")
        within, error = s.get("cost_within_30"), s.get("cost_error_median")
        if own:
            k, n = int(own.group(1)), int(own.group(2))
            cost = f"{k}/{n} = {k / n:.0%} ({int(own.group(3)):+d} %)"
        else:
            cost = "–" if within is None else f"{within:.0%}" + ("" if error is None else f" ({error:+.0%}, rows)")
        used = s.get("budget_used")
        statuses = s.get("statuses") or {}
        trials = f"{s.get('trials', 0)}" + (f" ({statuses.get('complete', 0)} complete)" if statuses else "")
        ratio = s.get("over_reference")
        if unit == "MFU":
            s = {**s, "reference": None if s.get("reference") is None else round(100 * s["reference"], 1),
                 "best": None if s.get("best") is None else round(100 * s["best"], 1)}  # fmt: skip
            unit = "% MFU"
        lines.append(" | ".join([
            f"| {case}" + (" (smoke)" if s.get("smoke") else ""), model + (", tiny preset" if s.get("smoke") else ""),
            f"{_num(s.get('reference'))} {unit}" if s.get("reference") else "–",
            f"{_num(s.get('best'))} {unit}" if s.get("best") is not None else "–",
            _num(ratio, "{:.3f}"), _num(s.get("t_99_of_final"), "{:.0f} s"),
            "never" if ratio and s.get("t_99_of_reference") is None else _num(s.get("t_99_of_reference"), "{:.0f} s"),
            f"{_num(s.get('wall_s'), '{:.0f}')} s / {_num(s.get('budget_s'), '{:.0f}')} s",
            "–" if used is None else f"{used:.0%}", cost, trials + " |",
        ]))  # fmt: skip
        notes += [f"{case}: {s[k]}" for k in ("ended", "cost_line") if s.get(k)]
    body = "\n".join(lines) + "\n"
    return body + ("\n" + "\n".join(f"- {n}" for n in notes) + "\n" if notes else "")


def _arguments() -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str]]:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path, nargs="?")
    a.add_argument("--case", choices=sorted(CASES))
    a.add_argument("--budget", type=float, default=300.0)
    a.add_argument("--safety", type=float, default=SAFETY_S, help="SIGTERM the sweep at budget + this (seconds)")
    a.add_argument(
        "--reference",
        type=float,
        help="a recorded reference (the case's hand loop on the same card, another run): the hand loop is not run",
    )
    a.add_argument(
        "--smoke",
        action="store_true",
        help="CPU: the tiny preset; the zoo's hand loops at tiny sizes on the CPU (checks the script)",
    )
    a.add_argument(
        "--table",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="write one markdown table from the budget-<case>.jsonl summaries under these folders",
    )
    args, extra = a.parse_known_args()  # the rest: Hydra overrides for the sweep
    return a, args, extra


def _photos(out: Path, name: str, extra: list[str]) -> list[str]:
    """The JPEG case's corpus of real photographs (not the generated one): its override, where it was made."""
    photos = out / "photos"
    made = subprocess.run([sys.executable, "bench/photo_corpus.py", str(photos)], cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip
    log(out, name, kind="corpus", exit=made.returncode, output=(made.stdout + made.stderr)[-300:])
    return [*extra, f"workload.root={photos}"] if made.returncode == 0 else extra


def _report(out: Path, name: str, case: dict[str, Any]) -> pd.DataFrame:
    """The sweep's rows packed in one file, its report copied to OUT; the rows."""
    results = out / "results"
    subprocess.run([sys.executable, "bench/pack.py", str(results), str(out / f"rows-{name}.parquet")], cwd=ROOT)
    report = subprocess.run([sys.executable, "-m", "sweeper.report", str(results)], cwd=ROOT, capture_output=True,
                            text=True, env={**env(case), "COLUMNS": "120"})  # fmt: skip
    (out / f"report-{name}.txt").write_text(report.stdout + report.stderr)
    md = results / "report.md"
    if md.exists():
        (out / f"report-{name}.md").write_text(md.read_text())
    files = sorted(p for p in (results / "trials").glob("*.parquet") if not p.name.startswith("+"))
    return pd.concat([pd.read_parquet(p) for p in files], ignore_index=True) if files else pd.DataFrame()


def _from_rows(rows: pd.DataFrame, metric: str, started: float, reference: float | None) -> dict[str, Any]:
    """What the rows say: statuses, the best and when it was reached, the cost model's error, the profiles."""
    summary: dict[str, Any] = {"statuses": rows["status"].value_counts().to_dict()}
    points = curve(rows, started, metric)
    done = rows[(rows["status"] == "complete") & rows[metric].notna()]
    if len(done):
        best = done.loc[done[metric].astype(float).idxmax()]
        final = float(best[metric])
        summary.update(
            best=final,
            best_trial=int(best["trial"]),
            best_knobs={c[5:]: best[c] for c in rows.columns if c.startswith("knob.") and pd.notna(best[c])},
            curve=points,
            t_99_of_final=first_at(points, 0.99 * final),
            over_reference=final / reference if reference else None,
            t_99_of_reference=first_at(points, 0.99 * reference) if reference else None,
        )
    if "predicted_wall_s" in rows:  # the cost model's prediction at launch against the trial's own wall
        ran = rows[(rows["predicted_wall_s"] > 0) & (rows["wall_s"] > 0) & (rows["status"] != "interrupted")]
        error = (ran["predicted_wall_s"] - ran["wall_s"]) / ran["wall_s"]
        summary["cost_within_30"] = round(float((error.abs() <= 0.3).mean()), 3) if len(ran) else None
        summary["cost_error_median"] = round(float(error.median()), 3) if len(ran) else None
    prof = [c for c in rows.columns if c.startswith("prof_")]
    if prof:
        profiled = rows[rows["prof_trace"].notna()] if "prof_trace" in rows else rows.iloc[0:0]
        summary["profiles"] = profiled[["trial", "baseline", metric, *prof]].to_dict("records")
    return summary


def main() -> None:
    a, args, extra = _arguments()
    if args.table:
        table = zoo_table(args.table)
        if args.out:
            args.out.write_text(table)
        print(table, end="")
        return
    if args.out is None or args.case is None:
        a.error("OUT and --case are needed (or --table DIR ...)")
    out, name, case = args.out, args.case, CASES[args.case]
    out.mkdir(parents=True, exist_ok=True)
    reference = args.reference or hand_loop(out, name, case, smoke=args.smoke)
    if name == "jpeg" and not args.smoke:  # real photographs, not the generated corpus
        extra = _photos(out, name, extra)
    overrides = extra + (["preset=tiny"] if args.smoke else [])
    started, wall, code = sweep(out, name, case, args.budget, overrides, args.safety)
    rows = _report(out, name, case)
    summary: dict[str, Any] = {"kind": "summary", "exit": code, "wall_s": round(wall, 1), "budget_s": args.budget,
                               "reference": reference, "reference_given": args.reference is not None,
                               "trials": len(rows), "smoke": args.smoke,
                               "unit": case.get("unit"), "model": case.get("kind"),
                               "ended": sweep_lines(out / f"sweep-{name}.log", "sweep ended:"),
                               "cost_line": sweep_lines(out / f"sweep-{name}.log", "cost model:")}  # fmt: skip
    if len(rows):
        summary.update(_from_rows(rows, case["metric"], started, reference))
        summary["budget_used"] = round(wall / args.budget, 3)
    log(out, name, **summary)


if __name__ == "__main__":
    main()
