"""``python -m sweeper +workload=<name> [-m]``: one trial, or (with -m) an Optuna sweep through the knob plugin."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

_STOPPED = "interrupted ({}) while starting: nothing ran; run the command again"


def _parent_process() -> object:
    import multiprocessing

    return multiprocessing.parent_process()


def _stop_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM before the sweep or the trial starts (imports, composing the config, the forkserver's
    start): one line, exit 130 or 143. Nothing is running yet, so there is nothing to record."""
    print(_STOPPED.format("SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"), file=sys.stderr, flush=True)
    os._exit(143 if signum == signal.SIGTERM else 130)


# Installed first (``sweeper/__init__`` imports nothing heavy before this), as the command: not under a test
# harness, and not in a launcher's worker process (joblib's), which imports this module for the task function
# and whose Ctrl-C and SIGTERM the sweeper handles.
if signal.getsignal(signal.SIGINT) is signal.default_int_handler and _parent_process() is None:
    signal.signal(signal.SIGINT, _stop_while_starting)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_while_starting)

import hydra  # noqa: E402 - after the handler: importing torch and Hydra takes seconds
from omegaconf import DictConfig  # noqa: E402

from sweeper.errors import ConfigError  # noqa: E402


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

    from sweeper.sweep.run.job import run_trial

    single = HydraConfig.get().mode == RunMode.RUN
    if single:
        from sweeper.sweep.run.progress import announce_single

        announce_single(cfg)
    try:
        result = run_trial(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if single:
        from sweeper.sweep.run.progress import print_single

        print_single(result)
        if result["status"] in ("failed", "infeasible"):
            raise SystemExit(1)
    return result


# Options after which a command is still a sweep that runs trials here; any other (--cfg, --info, ...) is not.
_SWEEP_OPTIONS = ("-m", "--multirun", "-cd", "--config-dir", "-cn", "--config-name")


def _start_forkserver(composed: DictConfig | None, argv: list[str]) -> None:
    """A sweep whose trials run here (Hydra's basic launcher) starts its forkserver now: torch's import (seconds)
    then overlaps Hydra's start and the study's opening. Other launchers start theirs where the trials run."""
    options = [a for a in argv if a.startswith("-")]
    if composed is None or not ({"-m", "--multirun"} & set(options)) or set(options) - set(_SWEEP_OPTIONS):
        return
    if str(composed.hydra.launcher.get("_target_", "")).endswith(".BasicLauncher"):
        from sweeper.sweep.run.recovery import start_forkserver_here

        start_forkserver_here(composed, may_run_here=True)


def main() -> None:
    from sweeper.sweep.cli import preflight, show_job

    register_plugin()
    # Hydra's argparse rejects overrides after a flag; `+workload=x -m n_trials=6` is natural, so flags go first.
    flags = [a for a in sys.argv[1:] if a in ("-m", "--multirun")]
    sys.argv = sys.argv[:1] + flags + [a for a in sys.argv[1:] if a not in flags]
    from sweeper.sweep.config.secrets import hide_argv, hide_composed

    sys.argv = sys.argv[:1] + hide_argv(sys.argv[1:])  # Hydra prints and saves overrides: no password in them
    composed = preflight(sys.argv[1:], _conf_dir())
    sys.argv = sys.argv[:1] + hide_composed(sys.argv[1:], composed)  # a password in one's own YAML: masked too
    show_job(sys.argv[1:], _conf_dir())  # `--cfg job`: the config a trial runs on, and the search space
    _start_forkserver(composed, sys.argv[1:])
    if signal.getsignal(signal.SIGINT) is _stop_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the sweep records what Ctrl-C stops
    if signal.getsignal(signal.SIGTERM) is _stop_while_starting:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # and what SIGTERM stops (``sweep.recovery.guarded``)
    try:
        task()
    except KeyboardInterrupt:  # before the sweep's own handling (opening the study) or in a single run
        print("interrupted (Ctrl-C): run the command again", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
