"""The forkserver's exit (sweeper/trial/forkserver_signals.py): what a reader of the sweeper's output waits for.

The forkserver holds the sweeper's stdout and stderr; its exit skips the interpreter's teardown (torch's, slow),
so a pipe reading a sweep's output reaches its end when the sweeper ends. Checked in a process that imports the
module as the forkserver does: its output flushed, the exit handlers registered after it run, nothing of the
teardown (a finalizer that only the teardown would call) does, and it exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import atexit, os, sys
import sweeper.trial.forkserver_signals  # as the forkserver's first preload module
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)

class Teardown:
    def __del__(self, write=os.write, fd=fd):  # bound now: the teardown clears the modules' names
        write(fd, b"teardown\\n")

kept = Teardown()  # a module global: collected by the interpreter's teardown only
atexit.register(lambda: os.write(fd, b"handler\\n"))  # as torch's, imported after it
sys.stdout.write("unflushed output")  # no newline: still in the buffer at exit
"""


def test_the_forkserver_exits_after_its_exit_handlers_without_the_teardown(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    done = subprocess.run([sys.executable, "-c", PROBE, str(marks)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "unflushed output"
    assert marks.read_text().splitlines() == ["handler"], "the teardown ran (or the handlers did not)"


def test_without_it_the_teardown_runs(tmp_path: Path) -> None:
    """The probe's control: the same process without the module's exit runs the finalizer at teardown."""
    probe = PROBE.replace("import sweeper.trial.forkserver_signals", "import signal")
    marks = tmp_path / "marks"
    done = subprocess.run([sys.executable, "-c", probe, str(marks)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert marks.read_text().splitlines() == ["handler", "teardown"]
