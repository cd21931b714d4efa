"""Random SIGKILLs on a journal-storage sweep with a budget: every command ends within its budget, nothing is lost.

One study on ``journal://<folder>/optuna.journal``, one command after another, each with
``hydra.sweeper.timeout_s`` and ``grace_s`` set. Each command is killed (SIGKILL, its whole process group: the
sweeper and its trials) at a random instant in ``[0.3 s, budget + grace + 5 s)``, or ends before it; a command
still running at ``budget + grace + 5 s`` is an overrun. After every command: each finished trial of the study has
exactly one row with the matching status, and no row names a trial the study lacks. At the end one command runs
unkilled; then nothing is RUNNING and rows = finished trials. Also counted: journal locks a kill left behind. A kill
lands inside a journal write (milliseconds) rarely; ``--plant`` leaves the lock such a kill leaves after some kills
(the killed sweeper's own, or one of Optuna's lock class), so the next command meets it.

    python bench/kill_loop_journal.py --kills 30 --plant --timeout-s 12 --grace-s 2 --out bench/results/<name>.json

Exit status 0 when every check held. Takes about a minute per 5 kills on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATE_OF = {"complete": "COMPLETE", "infeasible": "COMPLETE", "skipped": "PRUNED", "pruned": "PRUNED",
            "failed": "FAIL", "interrupted": "FAIL"}  # fmt: skip


def _args(results: Path, timeout_s: float, grace_s: float) -> list[str]:
    return [
        sys.executable, "-m", "sweeper", "hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults", "-m",
        "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(8,4000)'}", "hydra.sweeper.sampler=random",
        "hydra.sweeper.n_trials=1000", "hydra.sweeper.confirm_top_k=0", "hydra.sweeper.confirm_unstable=false",
        "workload.wait_ms=150", "trial.timeout_s=60", f"hydra.sweeper.storage=journal://{results}/optuna.journal",
        f"hydra.sweeper.timeout_s={timeout_s}", f"hydra.sweeper.grace_s={grace_s}", "hydra.sweeper.study_name=kills",
        f"results_dir={results}",
    ]  # fmt: skip


def _check(results: Path, final: bool) -> dict:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeper.results import store

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = results / "optuna.journal"
    if not path.exists():
        return {"trials": 0, "rows": 0, "problems": []}
    try:
        study = optuna.load_study(study_name="kills", storage=JournalStorage(JournalFileBackend(str(path))))
    except KeyError:
        return {"trials": 0, "rows": 0, "problems": []}
    df = store.read_results(results) if (results / "trials").is_dir() else None
    rows = {} if df is None or df.empty else {int(r["trial"]): r for _, r in df[df["study"] == "kills"].iterrows()}
    problems = []
    if df is not None and not df.empty and df[df["study"] == "kills"]["trial"].duplicated().any():
        problems.append("a row written twice")
    numbers = {t.number for t in study.trials}
    if set(rows) - numbers:
        problems.append(f"rows of trials the study lacks: {sorted(set(rows) - numbers)}")
    finished = 0
    for t in study.trials:
        if t.state.name == "WAITING":
            if t.number in rows:
                problems.append(f"trial {t.number} queued but has a row")
        elif t.state.name == "RUNNING":
            if final:
                problems.append(f"trial {t.number} still RUNNING")
        else:
            finished += 1
            if t.number not in rows:
                problems.append(f"trial {t.number} ({t.state.name}) has no row")
            elif STATE_OF[rows[t.number]["status"]] != t.state.name:
                problems.append(f"trial {t.number}: row {rows[t.number]['status']}, study {t.state.name}")
    return {"trials": len(study.trials), "finished": finished, "rows": len(rows), "problems": problems}


def _lock_target(results: Path) -> str | None:
    try:
        return os.readlink(str(results / "optuna.journal") + ".lock")
    except OSError:
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=30)
    p.add_argument("--timeout-s", type=float, default=12.0)
    p.add_argument("--grace-s", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=45)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--plant", action="store_true", help="leave a stale journal lock after some kills")
    a = p.parse_args()
    rng = random.Random(a.seed)
    bound = a.timeout_s + a.grace_s + 5.0
    results = Path(tempfile.mkdtemp(prefix="kill-loop-journal-")) / "results"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KNOB_SWEEPER_LOCK_DIR": str(results.parent / "locks")}
    commands, kills, overruns, locks_left, problems = [], 0, 0, 0, []
    while kills < a.kills:
        at = rng.uniform(0.3, bound)
        before = _lock_target(results)
        t0 = time.time()
        proc = subprocess.Popen(_args(results, a.timeout_s, a.grace_s), cwd=ROOT, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            _out, err = proc.communicate(timeout=at)
            how = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _out, err = proc.communicate()
            how, kills = "killed", kills + 1
        elapsed = time.time() - t0
        if how != "killed" and elapsed > bound:
            overruns += 1
        after = _lock_target(results)
        lock = after is not None and after != before  # left by this command (not one planted before it)
        locks_left += int(lock and how == "killed")
        planted = ""
        if a.plant and how == "killed" and after is None and (results / "optuna.journal").exists():
            # What a kill inside a journal write leaves (a window of milliseconds, rarely hit at random): the
            # killed sweeper's own lock (every 2nd kill), or one of Optuna's own lock class (every 5th)
            from sweeper.sweep.study.journal import TAG

            target = f"{TAG}{socket.gethostname()}:{proc.pid}:0" if kills % 5 else str(results / "optuna.journal")
            if kills % 2 == 0 or kills % 5 == 0:
                os.symlink(target, str(results / "optuna.journal") + ".lock")
                planted = "optuna" if kills % 5 == 0 else "dead-holder"
        state = _check(results, final=False)
        problems += state["problems"]
        counts = {k: v for k, v in state.items() if k != "problems"}
        commands.append({"kill_at_s": round(at, 2), "ended": how, "elapsed_s": round(elapsed, 2),
                         "lock_left": lock, "planted": planted, **counts})  # fmt: skip
        print(json.dumps(commands[-1]), flush=True)
        if how not in ("killed", "exit 0"):
            problems.append(f"command ended {how}: {err[-500:]}")
    t0 = time.time()
    proc = subprocess.run(_args(results, a.timeout_s, a.grace_s), cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.time() - t0
    final = _check(results, final=True)
    problems += final["problems"]
    if proc.returncode != 0:
        problems.append(f"final command exit {proc.returncode}: {proc.stderr[-500:]}")
    overruns += int(elapsed > bound)
    longest = max([c["elapsed_s"] for c in commands if c["ended"] != "killed"] + [elapsed])
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()}-core CPU",
        "kills": kills,
        "commands": len(commands) + 1,
        "timeout_s": a.timeout_s,
        "grace_s": a.grace_s,
        "bound_s": bound,
        "overruns": overruns,
        "longest_unkilled_command_s": round(longest, 2),
        "final_command_s": round(elapsed, 2),
        "journal_locks_left_by_kills": locks_left,
        "journal_locks_planted": sum(1 for c in commands if c["planted"]),
        "trials": final["trials"],
        "finished_trials": final.get("finished", 0),
        "rows": final["rows"],
        "problems": problems,
    }
    print(json.dumps(summary, indent=2))
    if a.out:
        a.out.write_text(json.dumps({"summary": summary, "commands": commands}, indent=1) + "\n")
    return 0 if not problems and not overruns and final["rows"] == final.get("finished", -1) else 1


if __name__ == "__main__":
    sys.exit(main())
