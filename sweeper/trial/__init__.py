"""The trial process: isolation, the child's entry, measurement, GPU probes, fingerprint, distributed ranks.

Everything here runs in the isolated trial process (or its ranks), except :mod:`sweeper.trial.isolate`, the
parent side that starts it, and the NVML probes of :mod:`sweeper.trial.gpu` that the sweeper also reads.
Imports go down only: ``sweeper.trial`` -> ``workloads`` and ``sweeper.results``; never ``sweeper.sweep``.
"""

__all__: list[str] = []  # no public names: the sweep starts it; a workload sees only its ``build`` call
