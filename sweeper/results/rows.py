"""The Parquet row of one trial: what the sweeper and the trial write (``make_row``), column by column.

Identity (study, study_id, trial), status, reason, message, the workload (and ``workload_module``, a user's own
module) and preset, ``knob.*`` (the knobs, and the distributed settings of a distributed trial only),
``param.*`` (the workload's parameters), the objectives, times, and every scalar metric of the outcome. The store
(``sweeper.results.store``) gives the columns their types and writes the file.
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

from sweeper.results.keys import flatten
from sweeper.results.outcome import TrialOutcome

# The row's identity and the columns the sweeper writes itself (here, in the Hydra job, and in the trial's
# fingerprint): a workload's own metric (``extra_metrics()``) may not take one of these names, or start with one of
# ``RESERVED_PREFIXES``.
IDENTITY = ("study", "study_id", "trial")
SWEEPER_COLUMNS = frozenset(
    [*IDENTITY]
    + """status reason message workload workload_module preset objectives started_at ended_at wall_s hostname baseline
    confirm_of node_shared node_shared_with space knob_defaults setup_s setup_load_s setup_build_s cpu_threads
    compile_s graph_breaks graph_ops compile_cache_hits compile_cache_misses compiler_s prime_s prime_waited_s""".split()
    # the fingerprint (sweeper.trial.fingerprint)
    + """cpu_model cpu_cores cpu_affinity torch_version cuda_version python_version device gpu_name gpu_count gpu_cc
    gpu_mem_bytes driver_version gpu_indices""".split()
)
# The Optuna trial attributes the sweeper writes and reads back (whose trial it is, whether it counts, what it cost,
# its configuration; named in ``sweeper.sweep.study.attrs.BOOKKEEPING``): every metric of an outcome is also a user
# attribute (``sweeper.sweep.study.trials.tell``), so none may take one of these names.
SWEEPER_ATTRIBUTES = frozenset(
    """owner command status reason confirm_of wall_s spent_s warm_start_from waits_for remeasure_for profile config_key
    predicted_wall_s handbook_start_retry failed_with""".split()
)
RESERVED_PREFIXES = ("knob.", "param.", "prof_", "knob_sweeper:")


def reserved(name: str) -> bool:
    """A column or attribute name the sweeper writes itself (a workload's own metric may not use it)."""
    return name in SWEEPER_COLUMNS or name in SWEEPER_ATTRIBUTES or str(name).startswith(RESERVED_PREFIXES)


def _timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def make_row(
    outcome: TrialOutcome,
    *,
    study: str,
    trial: int | None,
    cfg: dict[str, Any],
    objectives: list[tuple[str, str]],
    study_id: str | None = "",
) -> dict[str, Any]:
    """The Parquet row of one trial: identity, status, knobs, workload parameters, metrics, fingerprint."""
    row: dict[str, Any] = {
        "study": study,
        "study_id": study_id or "",
        "trial": trial,
        "status": outcome.status.value,
        "reason": outcome.reason,
        "message": outcome.message,
        "workload": cfg["workload"]["name"],
        "workload_module": cfg["workload"].get("module") or "",  # a user's own module, for the report's recipe
        "preset": cfg.get("preset") or "",
        "throughput": None,
        "throughput_unit": "",
        "peak_mem_bytes": None,
        "objectives": ",".join(f"{m}:{d}" for m, d in objectives),
        "started_at": _timestamp(outcome.started_at),
        "ended_at": _timestamp(outcome.ended_at),
        "wall_s": outcome.wall_s,
        "hostname": socket.gethostname(),  # replaced by the trial's own fingerprint when it ran
    }
    for key, value in flatten(cfg.get("knobs") or {}).items():
        row[f"knob.{key}"] = value
    distributed = cfg.get("distributed") or {}
    if (distributed.get("strategy") or "none") != "none":  # a block the trial never used leaves no columns
        for key, value in flatten(distributed).items():
            row[f"knob.distributed.{key}"] = value
    for key, value in flatten({k: v for k, v in cfg["workload"].items() if k not in ("name", "module")}).items():
        row[f"param.{key}"] = value if not isinstance(value, (list, dict)) else str(value)
    for key, value in outcome.metrics.items():
        if key in IDENTITY or key in ("status", "reason", "message", "started_at", "ended_at", "wall_s"):
            continue  # the outcome's own, never a metric's (the trial refuses a workload's metric of the name)
        if isinstance(value, (bool, int, float, str)) or value is None:
            row[key] = value
    return row
