"""The sweeper process (and the Hydra job it launches), laid out as the flow of one command:

* ``cli`` and ``plan``: the command -> bad input refused in one line -> one typed :class:`~sweeper.sweep.plan.SweepPlan`
  (from ``config``: settings, space, the trial's config);
* ``loop``: the algorithm, ask -> check -> fit the budget -> launch -> settle, until ``run.stop`` says why it ends;
* ``search``: what to try next and whether it fits the budget (samplers, costs, admission);
* ``run``: slots, launching through Hydra's launcher, settling, re-measuring, recovery, the console;
* ``study``: the Optuna study behind named functions (storage, attributes, tells).

Runs in the process that ``python -m sweeper ... -m`` starts (the Hydra sweeper plugin hands over to
:class:`sweeper.sweep.loop.SweepImpl`) and in the Hydra job, wherever the launcher puts it (the sweeper
process, a joblib worker, a SLURM job): :func:`sweeper.sweep.run.job.run_trial` runs one trial in an isolated
process (``sweeper.trial``) and writes its row (``sweeper.results``). Never imports torch or touches CUDA.

Imports go down only: ``sweeper.sweep`` -> ``sweeper.trial`` -> ``workloads``; ``sweeper.sweep`` -> ``sweeper.results``.
"""

__all__: list[str] = []  # no public names: the command line and the Hydra plugin are its interface
