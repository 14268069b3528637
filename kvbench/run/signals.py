"""SIGINT and SIGTERM, wherever they arrive: one line on stderr, a non-zero exit, nothing half-written.

- During start-up (the imports before ``main`` runs) nothing has been written yet: the early
  handlers, installed by ``kvbench/__init__`` as the package's first import, print one line and
  exit at once (130 for SIGINT, 143 for SIGTERM). Before that, Python's own start-up (``site``
  and the ``.pth`` files of the environment, 40 ms on an idle machine, several hundred on a busy
  one) runs no project code: a signal there is Python's (a SIGTERM kills the process, a SIGINT
  ends in "Fatal Python error: init_import_site"), and nothing of kvbench's has been written.
- From ``main`` on, SIGTERM raises ``Terminated`` (SIGINT raises KeyboardInterrupt), so the run,
  or the multirun parent, cleans up on the way out; ``held`` defers both while a run completes.
- Every signal is also noted (``received``), so that one that a library swallowed or turned into
  another error (an ``except`` or ``finally`` that broke while it unwound, a ``__del__`` whose
  exception Python only prints) still ends the process with its own code and one line
  (``kvbench.app.main`` asks ``received`` after the pre-check, after Hydra and at exit).
- A launcher worker (a joblib process) raises ``Terminated`` too, and watches its parent: when the
  parent dies (kill -9) the worker signals itself and cleans up like any interrupted run.
  ``stop_children`` is the parent's side: SIGTERM to its workers, SIGKILL to those that linger.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager

MAIN_PID_ENV = "KVBENCH_MAIN_PID"  # the pid of the ``kvbench`` process, for its launcher workers
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that the run cleans up."""


def exit_code(exc: BaseException) -> int:
    return 143 if isinstance(exc, Terminated) else 130


def what(exc: BaseException) -> str:
    return "terminated" if isinstance(exc, Terminated) else "interrupted"


# the commands that run work, by console script and by ``python -m`` module: each answers a signal
# in one line from its first import on (kvbench/__init__ installs the start-up handlers)
COMMANDS = {"kvbench": "kvbench.app", "kvbench-capacity": "kvbench.tools.capacity",
            "kvbench-report": "kvbench.tools.report", "kvbench-plot": "kvbench.tools.plot",
            "kvbench-results": "kvbench.results.cli", "kvbench-validate": "kvbench.sim.validate"}


def command_name() -> str | None:
    """The command this process is (``kvbench-capacity``), or None (a test, a script, another tool)."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script in COMMANDS:
        return script
    modules = {module: name for name, module in COMMANDS.items()}
    module = next((m for m in sys.orig_argv[1:3] if m in modules), None)
    if module is None and sys.argv and sys.argv[0].endswith("kvbench/app.py"):
        module = "kvbench.app"
    return modules.get(module) if module else None


def _exit_during_startup(signum, frame) -> None:
    os.write(2, f"{command_name() or 'kvbench'}: interrupted during start-up; nothing was written\n".encode())
    os._exit(EXIT_CODES.get(signum, 1))


def install_startup_handlers() -> None:
    """Until ``install_run_handlers``: a signal prints one line and ends the process."""
    for sig in EXIT_CODES:
        signal.signal(sig, _exit_during_startup)


_RECEIVED: list[int] = []  # every SIGINT/SIGTERM this process got since install_run_handlers


def mark() -> int:
    """A point in time for ``received(since=...)``."""
    return len(_RECEIVED)


def received(since: int = 0) -> int | None:
    """The first SIGINT or SIGTERM this process got (after the ``mark`` ``since``), None if none."""
    return _RECEIVED[since] if len(_RECEIVED) > since else None


def as_exception(signum: int) -> BaseException:
    """The exception a signal raises: Terminated for SIGTERM, KeyboardInterrupt for SIGINT."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _note_and_raise(signum, frame) -> None:
    _RECEIVED.append(signum)
    raise as_exception(signum)


def _note(signum, frame) -> None:
    _RECEIVED.append(signum)


class _QuietUnraisable:
    """A signal's exception raised where Python can only print it (a ``__del__``, a weakref
    callback): noted already, so print nothing; anything else goes to the hook before."""

    def __init__(self, before) -> None:
        self.before = before

    def __call__(self, unraisable) -> None:
        if not isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)):
            self.before(unraisable)


def install_run_handlers() -> None:
    """SIGTERM raises Terminated, SIGINT KeyboardInterrupt, each noted first (main thread only);
    forgets the signals noted before (a new run, or a worker's next job)."""
    if threading.current_thread() is threading.main_thread():
        _RECEIVED.clear()
        if not isinstance(sys.unraisablehook, _QuietUnraisable):
            sys.unraisablehook = _QuietUnraisable(sys.unraisablehook)
        for sig in EXIT_CODES:
            signal.signal(sig, _note_and_raise)


def is_command() -> bool:
    """Whether this process is the ``kvbench`` command (not a test or a script calling ``main``)."""
    return sys.argv[0].endswith(("/kvbench", "kvbench/app.py")) or "kvbench.app" in sys.orig_argv[1:3]


def note_only() -> None:
    """From here on a signal is only noted (the process is ending; ``received`` tells it)."""
    if threading.current_thread() is threading.main_thread():
        for sig in EXIT_CODES:
            signal.signal(sig, _note)


@contextmanager
def held():
    """Hold SIGINT and SIGTERM back while a run completes; they arrive right after.

    The handlers are swapped for one that only notes the signal (a thread mask would not do: a
    signal sent to the process may land on any other thread, and Python still runs its handler
    in the main thread); the first noted signal is raised again once the old handlers are back.
    """
    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        blocked = {signal.SIGINT, signal.SIGTERM}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return
    pending: list[int] = []
    old = {sig: signal.getsignal(sig) for sig in EXIT_CODES}
    def hold(signum, frame) -> None:
        _RECEIVED.append(signum)
        pending.append(signum)

    for sig in EXIT_CODES:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if pending:
            signal.raise_signal(pending[0])


def is_launcher_worker() -> bool:
    """Whether this process is a launcher's worker (not the ``kvbench`` process itself)."""
    main_pid = os.environ.get(MAIN_PID_ENV)
    return bool(main_pid) and main_pid != str(os.getpid())


MAIN_HOST_ENV = "KVBENCH_MAIN_HOST"
_WATCHED: dict[str, int] = {}  # the parent a worker watches


def mark_main_process() -> None:
    """Name this process as the kvbench process, for the workers its launcher starts."""
    os.environ[MAIN_PID_ENV] = str(os.getpid())
    os.environ[MAIN_HOST_ENV] = socket.gethostname()


def _expected_parent() -> int:
    """The kvbench process when this worker is its child on the same host (it may be gone
    already: the worker then stops at once), else whatever parent the worker has now."""
    main_pid = os.environ.get(MAIN_PID_ENV, "")
    same_host = os.environ.get(MAIN_HOST_ENV) == socket.gethostname()
    if same_host and main_pid.isdigit() and (os.getppid() == int(main_pid) or os.getppid() == 1):
        return int(main_pid)
    return os.getppid()
_IN_JOB = threading.Event()  # set while a worker runs a job


@contextmanager
def job_running():
    """Mark a worker's job as running, for the parent watch."""
    _IN_JOB.set()
    try:
        yield
    finally:
        _IN_JOB.clear()


def orphaned() -> bool:
    """Whether the parent this worker watches is gone."""
    return "parent" in _WATCHED and os.getppid() != _WATCHED["parent"]


def watch_parent(poll_s: float = 0.5, grace_s: float = 20.0) -> None:
    """In a launcher worker: once its parent is gone (its ppid changes), SIGTERM this process so
    that a running job cleans up, and end the process (at once when idle, else after grace_s)."""
    if "parent" in _WATCHED:
        return
    parent = _WATCHED["parent"] = _expected_parent()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        if _IN_JOB.is_set():
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while _IN_JOB.is_set() and time.monotonic() < deadline:
                time.sleep(0.1)
        os._exit(EXIT_CODES[signal.SIGTERM])

    threading.Thread(target=watch, name="kvbench-parent-watch", daemon=True).start()


def _children() -> list[int]:
    """Pids of this process's worker children (Linux /proc); resource trackers, which end on
    their own once every worker is gone, are left alone."""
    me, found = os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and b"resource_tracker" not in _cmdline(int(entry.name)):
            found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_children(grace_s: float = 15.0) -> int:
    """SIGTERM every child, wait up to ``grace_s`` for them to clean up, SIGKILL the rest; how many."""
    if not sys.platform.startswith("linux"):
        return 0
    children = _children()
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in children:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return len(children)
