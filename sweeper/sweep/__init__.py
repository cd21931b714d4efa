"""The sweeper process (and the Hydra job it launches): the sweep loop, Optuna plumbing, slots, launching.

Runs in the process that ``python -m sweeper ... -m`` starts (the Hydra sweeper plugin hands over to
:class:`sweeper.sweep.loop.SweepImpl`) and in the Hydra job, wherever the launcher puts it (the sweeper
process, a joblib worker, a SLURM job): :func:`sweeper.sweep.job.run_trial` runs one trial in an isolated
process (``sweeper.trial``) and writes its row (``sweeper.results``). Never imports torch or touches CUDA.

Imports go down only: ``sweeper.sweep`` -> ``sweeper.trial`` -> ``workloads``; ``sweeper.sweep`` -> ``sweeper.results``.
"""

__all__: list[str] = []  # no public names: the command line and the Hydra plugin are its interface
