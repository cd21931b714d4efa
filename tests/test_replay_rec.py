"""A replayed sweep of the DLRM-style recommender of bench/zoo, from its H100 rows (2026-12-07 11:34 UTC,
bench/results/h100-2026-12-07T1134-budget-rec*): a model whose compile in ``max-autotune-no-cudagraphs`` costs far
more than its prior says (priced 90 s from the default mode's 12.6 s; it ran 217 s until the budget cut it)."""

from __future__ import annotations

import pytest

from sweeper.sweep.study import trials as st
from tests.replay import Landscape, _open, replay
from tests.test_replay import OUTSIDE

MAX_AUTOTUNE = "max-autotune-no-cudagraphs"


def rec() -> Landscape:
    """Samples/s from the rows: fp32 batch 1024 eager 153 k; bf16 fused eager 636 k at 2048, 1.11 M at 4096,
    3.36 M at 16384 (fp16 2.76 M); compiled default 4.58 M, reduce-overhead 4.64 M at 16384. Batch 8192 and the
    modes' effects elsewhere are interpolated; max-autotune's compile (at least 217 s) is set to 400 s."""
    params = {
        "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
        "knobs.compile": f"choice(off, default, reduce-overhead, {MAX_AUTOTUNE})",
        "knobs.batch_size": "choice(1024, 2048, 4096, 8192, 16384)",
        "knobs.optimizer_impl": "choice(foreach, fused)",
    }
    defaults = {"knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 1024,
                "knobs.optimizer_impl": "foreach"}  # fmt: skip
    factors = {
        "knobs.precision": {"tf32": 1.2, "fp16": 1.23, "bf16": 1.5},
        "knobs.compile": {"default": 1.364, "reduce-overhead": 1.38, MAX_AUTOTUNE: 1.39},
        "knobs.batch_size": {2048: 1.93, 4096: 3.37, 8192: 6.0, 16384: 10.2},
        "knobs.optimizer_impl": {"fused": 1.44},
    }
    return Landscape(
        "rec",
        params,
        defaults,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0},
        153_099.0,
        factors,
        "knobs.batch_size",
        start_s=1.0,
        setup_s=(7.3, 8.3),
        compile_cold={"default": 12.6, "reduce-overhead": 12.6, MAX_AUTOTUNE: 400.0},
        compile_warm={"default": 2.0, "reduce-overhead": 2.0, MAX_AUTOTUNE: 20.0},
        graph_ops=86,
        neutral=OUTSIDE,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_trial_priced_by_a_prior_leaves_the_re_measurements_their_time(seed: int) -> None:
    """The max-autotune promotion, priced from the prior, is stopped where the re-measurements' reserve begins
    (``interrupted`` by the budget, a lower bound for its configuration), not at the budget's end: the best
    configuration and the baseline are then measured again, and the sweep ends within the budget. Before, it ran
    to the budget's end and neither re-measurement ran."""
    out = replay(rec(), budget_s=300.0, seed=seed)
    cut = [e for e in out.events if e.kind == "cut" and not e.repeat]
    assert cut and all(e.params.get("knobs.compile") == MAX_AUTOTUNE for e in cut), [
        (e.kind, e.params) for e in out.events
    ]
    repeats = [e for e in out.ran() if e.repeat]
    best = max((e for e in out.ran() if not e.repeat), key=lambda e: e.throughput or 0.0)
    assert any(e.params == best.params for e in repeats), "the best is measured again"
    assert len(repeats) >= 2, "and the baseline"
    assert out.ended_at <= 300.0 + 5.0, f"ended at {out.ended_at:.0f} s"
    assert out.ended_at >= 0.85 * 300.0, f"ended at {out.ended_at:.0f} s"


def test_what_a_trial_keeps_for_the_re_measurements() -> None:
    """``Admission.keep_s``: nothing before a compiled class was measured (the handbook's compiled start is the
    measurement the sweep is for), then the re-measurements' reserve for a trial priced by the prior, none for one
    priced by a measurement of its class, none for a repeat; the stop it gives is never before the trial's own
    predicted end."""
    sweep, baseline = _open(rec(), 300.0, 0, 5.0)
    admission, study = sweep.admission, sweep.study
    tuned = {"knobs.precision": "bf16", "knobs.batch_size": 16384, "knobs.optimizer_impl": "fused"}
    autotuned = {**tuned, "knobs.compile": MAX_AUTOTUNE}
    compiled = {**tuned, "knobs.compile": "default"}

    def measure(params: dict) -> None:
        study.enqueue_trial(params)
        trial = study.ask()
        sweep.run(trial, st.sample(trial, sweep.space, rec().defaults), False)

    assert admission.keep_s(autotuned) == 0.0, "nothing measured"
    measure(baseline)
    assert admission.keep_s(compiled) == 0.0, "no compiled class measured: the first compile keeps none"
    measure(compiled)
    reserve = admission.reserve()
    assert reserve > 0 and admission.keep_s(autotuned) == pytest.approx(reserve)
    assert admission.keep_s(autotuned, repeat=True) == 0.0, "a repeat keeps none"
    assert admission.keep_s({**compiled, "knobs.batch_size": 8192}) == 0.0, "its class measured: a measured price"
    scheduler, now = sweep.scheduler, sweep.clock.t
    assert scheduler.stop_at(reserve, 10.0) == pytest.approx(scheduler.deadline - reserve - scheduler.grace_s)
    late = scheduler.deadline - now - reserve  # predicted to end where the reserve begins: admitted, and not cut
    assert scheduler.stop_at(reserve, late) == pytest.approx(now + late)
