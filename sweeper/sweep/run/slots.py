"""Resource slots: how many trials run at once on this node, and which GPUs and cores each one owns.

Default (no ``trial.resources``): one trial at a time owning the whole node, so benchmark numbers compare.
With ``trial.resources: {gpus: G, cpus: C}`` the node is cut into disjoint slots of G GPUs and C cores; a trial
is pinned to its slot (``CUDA_VISIBLE_DEVICES`` and CPU affinity), so a DataLoader in one trial never takes
another trial's cores.

Slots hold across the sweeper processes of a node (``NodeSlots``): each core and GPU of a slot is an ``fcntl`` lock
file under ``trial.lock_dir``, so several sweepers on one node never run two trials on the same core or GPU at
once. The default folder is node-wide (``default_lock_dir``: one per user under the system's temporary folder),
so sweepers with different ``results_dir`` still take turns and see each other. ``Occupancy`` records who ran
where, in the node-wide folder whatever ``trial.lock_dir`` says, so a row says whether anything else of the
sweeper's ran on its device during its window (``node_shared``), e.g. sweepers with another lock_dir.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.results.procs import pid_alive

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True)
class Slot:
    index: int
    gpus: tuple[str, ...] | None  # CUDA_VISIBLE_DEVICES tokens (indices or UUIDs as this process sees them)
    cpus: tuple[int, ...] | None  # core ids for sched_setaffinity


def visible_gpu_tokens(count: int) -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [t.strip() for t in visible.split(",") if t.strip()][:count]
    return [str(i) for i in range(count)]


def make_slots(resources: dict[str, Any] | None, n_jobs: int, n_gpus: int) -> list[Slot]:
    """Cut the node into slots; ``n_jobs`` > 1 without resources runs that many unpinned trials at once."""
    resources = resources or {}
    g, c = resources.get("gpus"), resources.get("cpus")
    if not g and not c:
        return [Slot(i, None, None) for i in range(max(1, n_jobs))]
    cores = sorted(os.sched_getaffinity(0))
    tokens = visible_gpu_tokens(n_gpus)
    limits = []
    if g:
        if int(g) < 1 or int(g) > len(tokens):
            raise ConfigError(
                "trial.resources.gpus",
                f"asks {g} GPUs per trial but {len(tokens)} are visible",
                f"use 1..{len(tokens)}, or null on a CPU-only node" if tokens else "use null on a CPU-only node",
            )
        limits.append(len(tokens) // int(g))
    if c:
        if int(c) < 1 or int(c) > len(cores):
            raise ConfigError(
                "trial.resources.cpus",
                f"asks {c} cores per trial but this process may use {len(cores)}",
                f"use 1..{len(cores)}",
            )
        limits.append(len(cores) // int(c))
    if n_jobs > 1:
        limits.append(n_jobs)
    n = min(limits)
    return [
        Slot(
            i,
            tuple(tokens[i * int(g) : (i + 1) * int(g)]) if g else None,
            tuple(cores[i * int(c) : (i + 1) * int(c)]) if c else None,
        )
        for i in range(n)
    ]


def slot_overrides(slot: Slot) -> list[str]:
    out = []
    if slot.gpus is not None:
        out.append("gpus=[" + ",".join(f"'{t}'" for t in slot.gpus) + "]")
    if slot.cpus is not None:
        out.append("cpus=[" + ",".join(str(c) for c in slot.cpus) + "]")
    return out


# ---------------------------------------------------------------------------------------------------- node-wide


def slot_units(slot: Slot, n_slots: int, n_gpus: int) -> list[str]:
    """What a slot owns on the node, as lock names: ``cpu-<core>`` and ``gpu-<token>``. The default single slot
    owns the whole node (every core this process may use, every visible GPU); unpinned slots of ``n_jobs`` > 1 own
    nothing (the user asked for trials that share the node)."""
    if slot.cpus is None and slot.gpus is None:
        if n_slots > 1:
            return []
        return [f"cpu-{c}" for c in sorted(os.sched_getaffinity(0))] + [f"gpu-{t}" for t in visible_gpu_tokens(n_gpus)]
    return [f"cpu-{c}" for c in slot.cpus or ()] + [f"gpu-{t}" for t in slot.gpus or ()]


LOCK_DIR_ENV = "KNOB_SWEEPER_LOCK_DIR"  # the node's default lock folder, where ``trial.lock_dir`` is not given


def default_lock_dir() -> Path:
    """The node-wide lock folder: ``$KNOB_SWEEPER_LOCK_DIR``, else ``<temp dir>/knob-sweeper-<user>/locks``
    (``tempfile.gettempdir``: ``$TMPDIR`` or ``/tmp``), the same for every sweeper of the user on the node
    whatever its ``results_dir``."""
    import getpass
    import tempfile

    if os.environ.get(LOCK_DIR_ENV):
        return Path(os.environ[LOCK_DIR_ENV])
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = str(os.getuid())
    return Path(tempfile.gettempdir()) / f"knob-sweeper-{_file_name(user)}" / "locks"


def node_lock_dir(cfg: dict[str, Any]) -> Path:
    """``trial.lock_dir``, else the node-wide ``default_lock_dir()``."""
    return Path(cfg["trial"]["lock_dir"] or default_lock_dir())


def node_dir(lock_dir: str | os.PathLike) -> Path:
    """``<lock_dir>/<hostname>``: a results folder on a shared filesystem couples no two nodes."""
    return Path(lock_dir) / _file_name(socket.gethostname())


def _file_name(text: str) -> str:
    """``text`` as one file-name component: kept when it is one already, else made one, with a hash of the text
    (a MIG device's token ``MIG-GPU-<uuid>/1/0`` or a host name may hold a ``/``)."""
    import hashlib

    safe = _SAFE.sub("_", text).strip(".") or "_"
    return safe if safe == text else f"{safe[:60]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


class NodeSlots:
    """Slots held across every sweeper process of a node: a slot is taken by an exclusive ``fcntl.flock`` on one
    file per core and GPU it owns, under ``<lock_dir>/<host>/``. The kernel releases a dead process's locks, so a
    killed sweeper never leaves a slot taken. Two sweepers with overlapping slots (even of different shapes) thus
    never run trials on the same core or GPU at once; each waits for the other's trial to end."""

    YIELD_S = 1.0  # a released slot is left this long to a process waiting for it (it polls every 0.2 s)

    def __init__(self, lock_dir: str | os.PathLike, slots: list[Slot], n_gpus: int) -> None:
        self.dir = node_dir(lock_dir)
        self.units = {s.index: slot_units(s, len(slots), n_gpus) for s in slots}
        self.held: dict[int, list[int]] = {}  # slot index -> open lock files
        self.waiting: dict[int, list[int]] = {}  # slot index -> shared locks saying this process waits for it
        self.released: dict[int, float] = {}  # slot index -> when this process last released it
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.dir / "trials.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666))
        except OSError as e:
            raise ConfigError(
                "trial.lock_dir",
                f"{str(lock_dir)!r} cannot hold the node's slot locks ({e.strerror})",
                "give a writable folder, the same for every sweeper on the node",
            ) from None

    def take(self, free: list[Slot]) -> Slot | None:
        """The first of ``free`` whose every core and GPU could be locked now (removed from ``free``), or None.

        Turns are fair: a sweeper that could not take a slot says so with a shared lock on ``<unit>.wait``, and a
        sweeper that just released that slot leaves it to the waiter for ``YIELD_S`` instead of taking it again."""
        for slot in free:
            units = self.units[slot.index]
            if time.monotonic() - self.released.get(slot.index, -1e9) < self.YIELD_S and self._others_wait(units):
                continue
            fds = self._lock(units, fcntl.LOCK_EX)
            if fds is not None:
                free.remove(slot)
                self.held[slot.index] = fds
                self._close(self.waiting.pop(slot.index, []))
                return slot
            if slot.index not in self.waiting:
                marks = self._lock([f"{u}.wait" for u in units], fcntl.LOCK_SH)  # None: a releaser is looking
                if marks is not None:
                    self.waiting[slot.index] = marks
        return None

    def release(self, slot: Slot) -> None:
        self._close(self.held.pop(slot.index, []))  # closing the files drops their locks
        self.released[slot.index] = time.monotonic()

    def _others_wait(self, units: list[str]) -> bool:
        fds = self._lock([f"{u}.wait" for u in units], fcntl.LOCK_EX)
        self._close(fds or [])
        return fds is None

    @staticmethod
    def _close(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)

    def _lock(self, units: list[str], mode: int) -> list[int] | None:
        """``mode`` locks on every unit's file, or none (None) when one is held by another process."""
        fds: list[int] = []
        for unit in sorted(units):
            fd = os.open(self.dir / f"{_file_name(unit)}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                for held in fds:
                    os.close(held)
                return None
            fds.append(fd)
        return fds


class Occupancy:
    """Who ran on which core and GPU of this node, and when: ``<lock_dir>/<host>/trials.jsonl``, one line when a
    trial starts and one when it ends (appends of one short line are atomic). A trial's row says whether another
    trial ran on one of its cores or GPUs during its window (``node_shared``) and which (``node_shared_with``)."""

    def __init__(self, lock_dir: str | os.PathLike, units: list[str], study: str, trial: int | None) -> None:
        # Node-wide whatever ``trial.lock_dir`` says: sweepers that do not share a lock folder may run trials on one
        # core at once, the very case ``node_shared`` must report. ``lock_dir`` is written to as well when it is
        # another folder, and read: a trial sees every trial that noted itself in either.
        self.paths = list(
            dict.fromkeys([node_dir(default_lock_dir()) / "trials.jsonl", node_dir(lock_dir) / "trials.jsonl"])
        )
        self.path = self.paths[0]
        self.me = {"pid": os.getpid(), "study": study, "trial": trial, "id": f"{os.getpid()}-{time.time_ns()}"}
        self.units = sorted(set(units))
        self.start = 0.0
        self.window: tuple[float, float] | None = None  # the trial's own run (:meth:`ran`), once known

    def _append(self, entry: dict[str, Any]) -> None:
        for path in self.paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError:
                continue  # a record, not a lock: a folder that cannot be written costs its trial nothing
            try:
                os.write(fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
            finally:
                os.close(fd)

    def __enter__(self) -> Occupancy:
        self.start = time.time()
        self._append({**self.me, "units": self.units, "start": self.start})
        return self

    def ran(self, start: float | None, end: float | None) -> None:
        """The trial's own run (its row's ``started_at`` and ``ended_at``), inside the record's enter-to-exit span
        by the launch's and the row's few milliseconds: the window :meth:`shared_with` holds other records against,
        and, written at exit, the span other trials hold this one against. So ``node_shared`` says what the rows'
        own times say: a trial that started as another's row ended, while that one still wrote its row, is not
        flagged (nor is the other)."""
        if start is not None and end is not None:
            self.window = (start, end)

    def __exit__(self, *exc: Any) -> None:
        start, end = self.window or (self.start, time.time())
        self._append({"id": self.me["id"], "start": start, "end": end})

    def shared_with(self, end: float) -> list[str]:
        """``study#trial`` of other trials that ran on one of this trial's units between its start and ``end`` (its
        own run, where :meth:`ran` said it).

        A trial whose end was never written ran until now if its process lives; if it died, only a start inside this
        window proves an overlap (an old crash never marks later trials)."""
        entries: dict[str, dict[str, Any]] = {}
        lines: list[str] = []
        for path in self.paths:
            try:
                lines += path.read_text().splitlines()
            except OSError:
                pass
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash mid-write
            entries.setdefault(e.get("id", ""), {}).update(e)
        start, end = self.window or (self.start, end)
        out = []
        for key, e in entries.items():
            if key == self.me["id"] or "start" not in e or not set(e.get("units") or ()) & set(self.units):
                continue
            if "end" in e:
                overlaps = e["start"] < end and e["end"] > start
            elif pid_alive(int(e.get("pid", 0))):
                overlaps = e["start"] < end
            else:
                overlaps = start <= e["start"] < end
            if overlaps:
                out.append(f"{e.get('study')}#{e.get('trial')}")
        return sorted(out)


def trial_units(cfg: dict[str, Any]) -> list[str]:
    """The cores and GPUs a trial config runs on (its pinned ones, else all this process may use / sees)."""
    cores = cfg.get("cpus") or sorted(os.sched_getaffinity(0))
    units = [f"cpu-{c}" for c in cores]
    if str(cfg["device"]).startswith("cuda"):
        gpus = cfg.get("gpus") or visible_gpu_tokens(_gpu_count())
        units += [f"gpu-{t}" for t in gpus]
    return units


def _gpu_count() -> int:
    from sweeper.trial import gpu

    return gpu.device_info().count
