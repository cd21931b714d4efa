"""``python -m sweeper +workload=<name> [-m]``: one trial, or (with -m) an Optuna sweep through the knob plugin."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from sweeper.errors import ConfigError


def _conf_dir() -> str:
    """``conf/`` of a checkout (or editable install), else the copy packaged as ``sweeper/conf`` in a wheel."""
    checkout = Path(__file__).resolve().parent.parent / "conf"
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    return str(Path(__file__).resolve().parent / "conf")


def register_plugin() -> None:
    """Make the knob sweeper known to Hydra however the package was installed.

    Hydra finds plugins by listing the ``hydra_plugins`` namespace package with ``pkgutil``, and the finder of an
    editable install (``pip install -e .``) cannot be listed: the plugin would be missing (``unknown hydra
    'sweeper/knob'``). Importing it registers its config (``hydra/sweeper=knob``); ``register`` adds the class.
    """
    from hydra.core.plugins import Plugins

    from hydra_plugins.knob_sweeper.knob_sweeper import KnobSweeper

    Plugins.instance().register(KnobSweeper)


@hydra.main(version_base="1.3", config_path=_conf_dir(), config_name="config")
def task(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from sweeper.sweep.job import run_trial

    single = HydraConfig.get().mode == RunMode.RUN
    if single:
        from sweeper.sweep.progress import announce_single

        announce_single(cfg)
    try:
        result = run_trial(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if single:
        from sweeper.sweep.progress import print_single

        print_single(result)
        if result["status"] in ("failed", "infeasible"):
            raise SystemExit(1)
    return result


def main() -> None:
    from sweeper.sweep.cli import preflight, show_job

    register_plugin()
    # Hydra's argparse rejects overrides after a flag; `+workload=x -m n_trials=6` is natural, so flags go first.
    flags = [a for a in sys.argv[1:] if a in ("-m", "--multirun")]
    sys.argv = sys.argv[:1] + flags + [a for a in sys.argv[1:] if a not in flags]
    preflight(sys.argv[1:], _conf_dir())
    show_job(sys.argv[1:], _conf_dir())  # `--cfg job`: the config a trial runs on, and the search space
    task()


if __name__ == "__main__":
    main()
