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


@hydra.main(version_base="1.3", config_path=_conf_dir(), config_name="config")
def task(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from sweeper.sweep.job import run_trial

    try:
        result = run_trial(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if HydraConfig.get().mode == RunMode.RUN:
        from sweeper.sweep.progress import print_single

        print_single(result)
        if result["status"] in ("failed", "infeasible"):
            raise SystemExit(1)
    return result


def main() -> None:
    from sweeper.sweep.cli import preflight

    # Hydra's argparse rejects overrides after a flag; `+workload=x -m n_trials=6` is natural, so flags go first.
    flags = [a for a in sys.argv[1:] if a in ("-m", "--multirun")]
    sys.argv = sys.argv[:1] + flags + [a for a in sys.argv[1:] if a not in flags]
    preflight(sys.argv[1:], _conf_dir())
    task()


if __name__ == "__main__":
    main()
