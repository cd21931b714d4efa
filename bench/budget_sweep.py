"""Does a default sweep keep its wall-clock budget and still reach the ceiling? One case per GPU call.

    python bench/budget_sweep.py OUT --case resnet50|jpeg|transformer|vit [--budget 300] [--smoke]

Each case: the independent hand-written loop of the same model where the case has one (``bench/hand_loop.py`` for
ResNet-50, ``bench/own_model/hand_vit.py`` for the ViT-B/16 the project does not ship; the jpeg case decodes real
photographs, ``bench/photo_corpus.py``), then the default sweep
``python -m sweeper +workload=<w> -m hydra.sweeper.timeout_s=<budget>`` with NO outer timeout of ours (a safety
SIGTERM at budget + 120 s is recorded as a failure of the budget), then the report of its rows. The summary row
says the command's wall time against the budget, the best found against the reference, and when the sweep's
best-so-far first reached 0.99 of the reference (and of its own final best), the share of the budget used, and
how many trials' predicted wall times (``predicted_wall_s``, at launch) were within 30 % of their ``wall_s``.

Files in OUT: budget-<case>.jsonl (hand loop, sweep, summary), sweep-<case>.log, report-<case>.md,
rows-<case>.parquet (every trial row, bench/pack.py), results/ (the sweep's folder).
"""

from __future__ import annotations

import argparse
import json
import os
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
    "resnet50": {"args": ["+workload=resnet50"], "metric": "throughput",
                 "hand": ["bench/hand_loop.py", "--precision", "fp16", "--batch", "1024", "--zero-init"]},
    "jpeg": {"args": ["+workload=resnet50", "workload.data=jpeg"], "metric": "throughput"},
    "transformer": {"args": ["+workload=transformer_block"], "metric": "mfu"},
    "vit": {"args": ["-cd", "bench/own_model/conf", "+workload=vit"], "metric": "throughput",
            "hand": ["bench/own_model/hand_vit.py", "--batch", "256", "--precision", "bf16"],
            "pythonpath": "bench/own_model"},
}  # fmt: skip
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


def hand_loop(out: Path, name: str, case: dict[str, Any]) -> float | None:
    """The hand loop's best img/s (its own inductor cache: the sweep must not find its kernels compiled)."""
    if not case.get("hand"):
        return None
    cmd = [sys.executable, str(ROOT / case["hand"][0]), *case["hand"][1:], "--json", str(out / f"hand-{name}.jsonl")]
    hand_env = {**env(case), "TORCHINDUCTOR_CACHE_DIR": str(out / "hand_inductor_cache")}
    proc = subprocess.run(cmd, cwd=ROOT, env=hand_env, capture_output=True, text=True, timeout=400)
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    log(out, name, kind="hand", exit=proc.returncode, rows=rows, stderr=proc.stderr[-500:] if proc.returncode else "")
    values = [float(r["img_s"]) for r in rows if r.get("img_s")]
    return max(values) if values else None


def sweep(out: Path, name: str, case: dict[str, Any], budget: float, extra: list[str]) -> tuple[float, float, int]:
    results = out / "results"
    cmd = [sys.executable, "-m", "sweeper", *case["args"], "-m", f"results_dir={results}",
           f"hydra.sweeper.timeout_s={budget:g}", "hydra.sweeper.n_trials=1000", f"hydra.sweep.dir={out / 'sweep'}",
           *extra]  # fmt: skip
    started = time.time()
    with (out / f"sweep-{name}.log").open("w") as f:  # each line stamped with the seconds since launch
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env(case))  # fmt: skip

        def copy() -> None:
            for line in proc.stdout:
                f.write(f"{time.time() - started:7.1f} {line}")

        reader = threading.Thread(target=copy, daemon=True)  # a trial's orphan holding the pipe cannot hold us
        reader.start()
        try:
            code = proc.wait(timeout=budget + SAFETY_S)
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


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("--case", choices=sorted(CASES), required=True)
    a.add_argument("--budget", type=float, default=300.0)
    a.add_argument("--reference", type=float, help="the reference when the case has no hand loop (a recorded best)")
    a.add_argument("--smoke", action="store_true", help="CPU: no hand loop, the tiny preset (checks the script)")
    args, extra = a.parse_known_args()  # the rest: Hydra overrides for the sweep
    out, name, case = args.out, args.case, CASES[args.case]
    out.mkdir(parents=True, exist_ok=True)
    reference = None if args.smoke else hand_loop(out, name, case)
    reference = reference or args.reference
    if name == "jpeg" and not args.smoke:  # real photographs, not the generated corpus
        photos = out / "photos"
        made = subprocess.run([sys.executable, "bench/photo_corpus.py", str(photos)], cwd=ROOT, capture_output=True,
                              text=True)  # fmt: skip
        log(out, name, kind="corpus", exit=made.returncode, output=(made.stdout + made.stderr)[-300:])
        if made.returncode == 0:
            extra = [*extra, f"workload.root={photos}"]
    started, wall, code = sweep(out, name, case, args.budget, extra + (["preset=tiny"] if args.smoke else []))
    results = out / "results"
    subprocess.run([sys.executable, "bench/pack.py", str(results), str(out / f"rows-{name}.parquet")], cwd=ROOT)
    report = subprocess.run([sys.executable, "-m", "sweeper.report", str(results)], cwd=ROOT, capture_output=True,
                            text=True, env={**env(case), "COLUMNS": "120"})  # fmt: skip
    (out / f"report-{name}.txt").write_text(report.stdout + report.stderr)
    md = results / "report.md"
    if md.exists():
        (out / f"report-{name}.md").write_text(md.read_text())
    files = sorted(p for p in (results / "trials").glob("*.parquet") if not p.name.startswith("+"))
    rows = pd.concat([pd.read_parquet(p) for p in files], ignore_index=True) if files else pd.DataFrame()
    summary: dict[str, Any] = {"kind": "summary", "exit": code, "wall_s": round(wall, 1), "budget_s": args.budget,
                               "reference": reference, "trials": len(rows)}  # fmt: skip
    if len(rows):
        metric = case["metric"]
        summary["statuses"] = rows["status"].value_counts().to_dict()
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
        summary["budget_used"] = round(wall / args.budget, 3)
        if "predicted_wall_s" in rows:  # the cost model's prediction at launch against the trial's own wall
            ran = rows[(rows["predicted_wall_s"] > 0) & (rows["wall_s"] > 0) & (rows["status"] != "interrupted")]
            error = (ran["predicted_wall_s"] - ran["wall_s"]) / ran["wall_s"]
            summary["cost_within_30"] = round(float((error.abs() <= 0.3).mean()), 3) if len(ran) else None
            summary["cost_error_median"] = round(float(error.median()), 3) if len(ran) else None
        prof = [c for c in rows.columns if c.startswith("prof_")]
        if prof:
            profiled = rows[rows["prof_trace"].notna()] if "prof_trace" in rows else rows.iloc[0:0]
            summary["profiles"] = profiled[["trial", "baseline", metric, *prof]].to_dict("records")
    log(out, name, **summary)


if __name__ == "__main__":
    main()
