"""Does the default sweep find the ceiling? Hand-written references and the default sweep, in one GPU call.

    python bench/ceiling.py OUT [--data synthetic|jpeg] [--sweep-s 420] [--smoke] [--hand bf16:256,bf16:512,fp16:512]

``--data synthetic`` (issue "Reach the ceiling"): the independent hand-written loops of ``bench/hand_loop.py``
(torch.compile default; bf16 at batch 256 and 512, fp16 with zero-initialised residual BN at 512), then the
default ``python -m sweeper +workload=resnet50 -m`` with ``hydra.sweeper.timeout_s``. Prints found / best hand
loop, when the sweep first reached 95 % of its final best (and the hand loop's level), and best-so-far over time.

``--data jpeg`` (issue "decode strategies"): the tool's single run of the compiled model on synthetic data
(bf16, channels_last, compile, cudnn, fused, batch 256: the reference), then the default
``workload.data=jpeg`` sweep; afterwards the best JPEG row's own model knobs are measured again on synthetic data,
so its ratio compares the pipeline with the very model it fed.

Rows: OUT/ceiling-<data>.jsonl (references and summary) and OUT/results/ (the sweep's Parquet rows and study).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
MODEL_KNOBS = (
    "precision",
    "memory_format",
    "compile",
    "cudnn_benchmark",
    "batch_size",
    "optimizer_impl",
    "grad_accum_steps",
    "activation_checkpointing",
)
REFERENCE = [
    "knobs.precision=bf16",
    "knobs.memory_format=channels_last",
    "knobs.compile=default",
    "knobs.cudnn_benchmark=true",
    "knobs.optimizer_impl=fused",
    "knobs.batch_size=256",
]


def log(out: Path, data: str, **row: Any) -> None:
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **row}
    with (out / f"ceiling-{data}.jsonl").open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
    print(json.dumps(row, default=str), flush=True)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def hand_loops(out: Path, specs: list[str], seconds: float) -> list[dict[str, Any]]:
    """The hand-written loops, compiling into their own inductor cache: the sweep must not find its kernels
    compiled by them (its time to the ceiling would read short)."""
    rows = []
    hand_env = {**env(), "TORCHINDUCTOR_CACHE_DIR": str(out / "hand_inductor_cache")}
    for spec in specs:
        precision, batch = spec.split(":")
        cmd = [
            sys.executable,
            str(ROOT / "bench" / "hand_loop.py"),
            "--precision",
            precision,
            "--batch",
            batch,
            "--seconds",
            str(seconds),
            "--json",
            str(out / "hand_loops.jsonl"),
        ]
        if precision == "fp16":
            cmd.append("--zero-init")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=hand_env, timeout=400)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode or not lines:
            log(out, "synthetic", kind="hand", spec=spec, error=proc.stderr[-400:])
            continue
        row = json.loads(lines[-1])
        rows.append(row)
        log(out, "synthetic", kind="hand", spec=spec, **row)
    return rows


def single_run(out: Path, results: Path, overrides: list[str]) -> dict[str, Any]:
    before = set((results / "trials").glob("*.parquet")) if (results / "trials").exists() else set()
    cmd = [
        sys.executable,
        "-m",
        "sweeper",
        "+workload=resnet50",
        f"results_dir={results}",
        "hydra.sweeper.study_name=reference",
        *overrides,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env(), timeout=500)
    new = sorted(set((results / "trials").glob("*.parquet")) - before)
    if not new:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-400:]}"}
    return pd.read_parquet(new[-1]).iloc[-1].to_dict()


def sweep(
    out: Path, results: Path, data: str, seconds: float, extra: list[str], grace_s: float
) -> tuple[float, pd.DataFrame]:
    cmd = [
        sys.executable,
        "-m",
        "sweeper",
        "+workload=resnet50",
        "-m",
        f"results_dir={results}",
        f"hydra.sweeper.timeout_s={int(seconds)}",
        "hydra.sweeper.n_trials=1000",
        *extra,
    ]
    if data == "jpeg":
        cmd.append("workload.data=jpeg")
    started = time.time()
    with (out / f"sweep-{data}.log").open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env())
        try:  # past the budget only the trials already running go on; a cold compile can take minutes
            code = proc.wait(timeout=seconds + grace_s)
        except subprocess.TimeoutExpired:  # stop it as Ctrl-C would: running trials are recorded as interrupted
            proc.send_signal(signal.SIGTERM)
            code = proc.wait()
    log(out, data, kind="sweep", exit=code, wall_s=time.time() - started, started=started, command=" ".join(cmd[2:]))
    files = sorted(p for p in (results / "trials").glob("*.parquet") if not p.name.startswith("+"))
    return started, sweep_rows(pd.concat([pd.read_parquet(p) for p in files], ignore_index=True), data) if files else (
        pd.DataFrame(columns=["study", "status", "throughput", "ended_at"])
    )


def sweep_rows(rows: pd.DataFrame, data: str) -> pd.DataFrame:
    study = "resnet50-jpeg" if data == "jpeg" else "resnet50"
    return rows[rows["study"].astype(str).str.startswith(study) & (rows["study"] != "reference")]


def curve(rows: pd.DataFrame, started: float) -> list[tuple[float, float]]:
    """(seconds after the sweep started, best throughput so far) at each completed trial's end."""
    done = rows[rows["status"] == "complete"].copy()
    done["t"] = pd.to_datetime(done["ended_at"], utc=True).map(lambda ts: ts.timestamp() - started)
    best, points = 0.0, []
    for _, r in done.sort_values("t").iterrows():
        if r["throughput"] > best:
            best = float(r["throughput"])
            points.append((round(float(r["t"]), 1), best))
    return points


def _override_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def first_at(points: list[tuple[float, float]], level: float) -> float | None:
    return next((t for t, v in points if v >= level), None)


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("--data", choices=("synthetic", "jpeg"), default="synthetic")
    a.add_argument("--sweep-s", type=float, default=420)
    a.add_argument("--hand", default="bf16:256,bf16:512,fp16:512")
    a.add_argument("--hand-seconds", type=float, default=3.0)
    a.add_argument("--smoke", action="store_true", help="CPU: no hand loops, tiny sweep (checks the script)")
    a.add_argument("--grace-s", type=float, default=60, help="after the budget, stop the sweep (SIGTERM) this late")
    a.add_argument(
        "--summarize",
        metavar="ROWS.parquet",
        type=Path,
        help="only summarize an earlier run: its packed rows (bench/pack.py), its OUT's jsonl (the references)",
    )
    a.add_argument("--started", help="with --summarize: when that sweep was launched (ISO time, UTC)")
    args, more = a.parse_known_args()  # the rest: Hydra overrides for the sweep (trial.timeout_s=200 ...)
    args.extra = more
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(results / "inductor_cache"))
    extra = list(args.extra) + (["preset=tiny"] if args.smoke else [])

    if args.summarize:
        references = [json.loads(ln) for ln in (out / f"ceiling-{args.data}.jsonl").read_text().splitlines()]
        reference, ref_name = best_reference(references, args.data)
        started = pd.Timestamp(args.started, tz="UTC").timestamp()
        rows = sweep_rows(pd.read_parquet(args.summarize), args.data)
        summarize(args, out, results, rows, started, reference, ref_name, recomputed=True)
        return
    reference, ref_name = 0.0, ""
    if args.data == "synthetic":
        hands = [] if args.smoke else hand_loops(out, [s for s in args.hand.split(",") if s], args.hand_seconds)
        reference, ref_name = best_reference([{"kind": "hand", **h} for h in hands], "synthetic")
    else:
        ref = single_run(
            out, results, REFERENCE + (["preset=tiny", "knobs.batch_size=4", "knobs.compile=off"] if args.smoke else [])
        )
        log(out, "jpeg", kind="reference", **{k: ref.get(k) for k in ("status", "throughput", "error")})
        reference, ref_name = best_reference([{"kind": "reference", **ref}], "jpeg")

    started, rows = sweep(out, results, args.data, args.sweep_s, extra, args.grace_s)
    summarize(args, out, results, rows, started, reference, ref_name)


def best_reference(rows: list[dict[str, Any]], data: str) -> tuple[float, str]:
    """The reference the sweep is compared with: the fastest finite hand loop (synthetic) or the tool's single
    compiled run on synthetic data (jpeg); (0, "") when there is none."""
    if data == "synthetic":
        finite = [r for r in rows if r.get("kind") == "hand" and r.get("finite")]
        if not finite:
            return 0.0, ""
        top = max(finite, key=lambda h: h["img_s"])
        return float(top["img_s"]), f"hand loop {top['precision']} bs{top['batch']}"
    refs = [r for r in rows if r.get("kind") == "reference" and r.get("throughput")]
    return (float(refs[-1]["throughput"]), "tool, synthetic, bf16 compiled bs256") if refs else (0.0, "")


def summarize(
    args: argparse.Namespace,
    out: Path,
    results: Path,
    rows: pd.DataFrame,
    started: float,
    reference: float,
    ref_name: str,
    recomputed: bool = False,
) -> None:
    points = curve(rows, started)
    done = rows[rows["status"] == "complete"]
    best = done.loc[done["throughput"].idxmax()] if len(done) else None
    summary: dict[str, Any] = {
        "kind": "summary",
        "trials": len(rows),
        "complete": len(done),
        "statuses": rows["status"].value_counts().to_dict(),
        "curve": points,
        "reference": reference,
        "reference_is": ref_name,
        "recomputed_from_rows": recomputed,
    }
    if best is not None:
        final = float(best["throughput"])
        knobs = {c[5:]: best[c] for c in rows.columns if c.startswith("knob.") and pd.notna(best[c])}
        summary.update(
            best=final,
            best_knobs=knobs,
            best_trial=int(best["trial"]),
            t_95_of_final=first_at(points, 0.95 * final),
            found_over_reference=final / reference if reference else None,
            t_reached_reference=first_at(points, reference) if reference else None,
        )
        for col in ("data_wait_frac", "data_wait_host_frac", "gpu_util_mean", "data_limit_stage", "mfu", "step_cv"):
            if col in best:
                summary[f"best_{col}"] = best[col]
    log(out, args.data, **summary)  # first, so that a run stopped during the next measurement keeps it
    if best is not None and args.data == "jpeg" and not recomputed:
        same = [
            f"knobs.{k}={_override_value(best[f'knob.{k}'])}"
            for k in MODEL_KNOBS
            if f"knob.{k}" in best and pd.notna(best[f"knob.{k}"])
        ]
        if args.smoke:
            same.append("preset=tiny")
        own = single_run(out, results, same)
        extra = {
            "own_model_synthetic": own.get("throughput"),
            "over_own_model": summary["best"] / float(own["throughput"]) if own.get("throughput") else None,
        }
        summary.update(extra)
        log(out, args.data, kind="own_model", best_trial=summary["best_trial"], **extra)
    print(
        f"\nbest {summary.get('best')} vs {ref_name} {reference:.0f}: ratio {summary.get('found_over_reference')}"
        f"; 95 % of final best at {summary.get('t_95_of_final')} s; reference level at "
        f"{summary.get('t_reached_reference')} s; statuses {summary['statuses']}"
    )
    for t, v in points:
        print(f"  {t:7.1f} s  {v:10.4g}")


if __name__ == "__main__":
    main()
