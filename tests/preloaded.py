"""``python -m sweeper`` commands forked from a process that has already imported the command's modules.

A test that runs a chain of sweeper commands, each of its own process (killed with SIGKILL, sent a Ctrl-C), pays
each command's interpreter start and imports (Hydra, Optuna, SQLAlchemy, Alembic, pandas, pyarrow: over a second on
the CI machine) again. :class:`Preloaded` starts one server process that imports them once, then forks a child per
command: the child is the command's own process (its own pid and start time, its own forkserver, trials and storage
connections, as ``python -m sweeper`` makes them; nothing was started or opened before the fork), takes the
command's environment, working folder and ``sys.argv``, and runs ``sweeper.__main__.main``, ending as that command's
interpreter does (its exit code, a signal's death, an uncaught exception's traceback and exit 1, the ``atexit``
handlers). The server waits, as :func:`conftest.run_cli` does, until the command's stdout and stderr are closed by
every process that inherited them, then reaps the child and answers with its exit status (``-9``: SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What ``python -m sweeper -m ...`` imports in its own process before its first trial (its trials' modules, torch
# among them, are imported by the forkserver it starts, a fresh interpreter): imported here once, ahead of the fork.
PRELOAD = (
    "sweeper.__main__",
    "sweeper.sweep.cli",
    "sweeper.sweep.loop",
    "sweeper.sweep.run.recovery",
    "sweeper.results.store",
    "hydra_plugins.knob_sweeper.knob_sweeper",
    "optuna.storages._rdb.storage",
    "optuna.storages._rdb.models",
    "optuna.storages.journal",
    "alembic.command",
    "alembic.config",
    "alembic.migration",
    "alembic.script",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "pandas",
    "pyarrow.parquet",
)


class Preloaded:
    """A server process with the sweeper's modules imported; :meth:`run_cli` runs one command as a child of it."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        # loaded by path: ``tests/`` stays off the command's ``sys.path``, which starts as ``python -m``'s does
        code = (
            "import importlib.util as u; s = u.spec_from_file_location('preloaded', 'tests/preloaded.py'); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve()"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        ready = self.proc.stdout.readline()
        assert ready.strip() == "ready", f"the preloading process did not start: {ready!r}"

    def run_cli(
        self,
        args: list[str],
        results: Path,
        env: dict[str, str] | None = None,
        timeout: float = 300,
        check: bool = False,
    ) -> subprocess.CompletedProcess:
        """What :func:`conftest.run_cli` returns for ``python -m sweeper <args> results_dir=<results>``."""
        argv = [str(ROOT / "sweeper" / "__main__.py"), *args, f"results_dir={results}"]
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
        request = {"argv": argv, "env": full_env, "cwd": str(ROOT), "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = int(self.proc.stdout.readline())  # the command's process
        try:
            answer = self.proc.stdout.readline()
        except BaseException:  # the test's own timeout: the command is killed, as subprocess.run kills its child
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.close()  # it answers no other command: the next answer would be this one's
            raise
        assert answer, "the preloading process ended"
        done = json.loads(answer)
        if done["timed_out"]:
            raise subprocess.TimeoutExpired(["sweeper", *args], timeout, done["stdout"], done["stderr"])
        proc = subprocess.CompletedProcess(["sweeper", *args], done["returncode"], done["stdout"], done["stderr"])
        if check and proc.returncode != 0:
            what = f"sweeper {' '.join(args)} exited {proc.returncode}"
            raise AssertionError(f"{what}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        return proc

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serve() -> None:
    """The server: import ``PRELOAD``, then for each request line (JSON) fork the command and answer its outcome."""
    import importlib
    import threading

    for name in PRELOAD:
        importlib.import_module(name)
    # fork copies only the calling thread: a thread started by an import would leave the child half a process
    assert threading.active_count() == 1, f"threads before the fork: {threading.enumerate()}"
    requests, answers = sys.stdin, os.fdopen(os.dup(sys.stdout.fileno()), "w")
    print("ready", file=answers, flush=True)
    for line in requests:
        request = json.loads(line)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            os.close(err_r)
            _become(request, out_w, err_w, answers)
            from sweeper import __main__ as entry

            entry.main()
            raise SystemExit(0)  # the interpreter's own exit (atexit handlers), never back into this loop
        print(pid, file=answers, flush=True)
        os.close(out_w)
        os.close(err_w)
        answer = _collect(pid, out_r, err_r, request["timeout"])
        print(json.dumps(answer), file=answers, flush=True)


def _become(request: dict, out_w: int, err_w: int, answers: object) -> None:
    """In the forked child: the command's stdin (none), stdout, stderr, environment, folder and argv."""
    answers.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    for fd in (null, out_w, err_w):
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])


def _collect(pid: int, out_r: int, err_r: int, timeout: float) -> dict:
    """Both streams read to their end (every process holding them closed them), then the child reaped."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            for key, _ in sel.select(timeout=left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    for fd in chunks:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    text = {fd: b"".join(parts).decode(errors="replace") for fd, parts in chunks.items()}
    return {"returncode": code, "stdout": text[out_r], "stderr": text[err_r], "timed_out": timed_out}
