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

from sweeper.sweep.config.settings import KnobSweeperConf, PrunerConf, register_configs

__all__ = ["KnobSweeper", "KnobSweeperConf", "PrunerConf"]

register_configs(ConfigStore.instance())  # hydra/sweeper=knob, and the defaults conf/config.yaml composes


class KnobSweeper(Sweeper):
    def __init__(self, **conf: Any) -> None:
        from sweeper.sweep.loop import SweepImpl

        self._impl = SweepImpl(**conf)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self._impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        return self._impl.sweep(arguments)
