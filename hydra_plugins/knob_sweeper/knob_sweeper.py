"""The Hydra Sweeper plugin that Hydra discovers (it must be defined in the ``hydra_plugins`` namespace).

A thin wrapper: the config dataclass (``sweeper.sweep.config.settings.KnobSweeperConf``, one comment per field, every
default written there) registered in Hydra's ConfigStore as ``hydra/sweeper=knob`` (its OmegaConf twin: ``Literal``
choices erased), the trial config's typed nodes' defaults (``<node>_defaults``, composed by conf/config.yaml), and
a class that hands ``setup``/``sweep`` to ``sweeper.sweep.loop.SweepImpl`` (imported lazily, so plugin discovery
stays cheap).
"""

from typing import Any, List

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper

from sweeper.sweep.config.settings import KnobSweeperConf, PrunerConf
from sweeper.sweep.config.structured import defaults, omegaconf_schema
from sweeper.trial.conf import NODES, RunConf

__all__ = ["KnobSweeper", "KnobSweeperConf", "PrunerConf"]

ConfigStore.instance().store(
    group="hydra/sweeper", name="knob", node=omegaconf_schema(KnobSweeperConf), provider="knob_sweeper"
)
# The trial config's typed nodes, each default written once in its dataclass: conf/config.yaml composes them
# (``measure_defaults@measure``, ...). Plain nodes, not the typed schema, so that a bad value reaches the
# validation's one line (``sweeper.sweep.config.schema``); configs, not a group, so --help lists no such group.
for _node, _cls in NODES.items():
    ConfigStore.instance().store(name=f"{_node}_defaults", node=defaults(_cls), provider="knob_sweeper")
ConfigStore.instance().store(name="run_defaults", node=defaults(RunConf), provider="knob_sweeper")  # top-level keys


class KnobSweeper(Sweeper):
    def __init__(self, **conf: Any) -> None:
        from sweeper.sweep.loop import SweepImpl

        self._impl = SweepImpl(**conf)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self._impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        return self._impl.sweep(arguments)
