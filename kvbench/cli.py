"""The console scripts' shared contract: one grammar, one line per failure, the same signals.

- ``OneLineParser`` is an ``argparse.ArgumentParser`` whose usage errors print
  ``<prog>: error: <what>`` on one line (argparse prints the usage block first) and exit 2. Its
  options may come anywhere among the positionals (Hydra overrides included: argparse's
  intermixed parsing), and an option that takes one value refuses to be given twice (argparse
  would keep the last one silently); ``append`` options (``--where``) repeat as they should.
- ``number`` is the one parser of every numeric option of every tool: a finite number in its
  range, the unit in its message; ``number_type`` is its argparse ``type=``. ``finite_positive``
  is the ``type=`` of a number of seconds or a count that must be > 0.
- ``command(prog)`` wraps a tool's ``main``: SIGINT ends it with 130 and SIGTERM with 143, one
  line each (``kvbench.run.signals``), and a library's warnings never reach the user (the
  project's own are one line each).
"""
from __future__ import annotations

import argparse
import functools
import logging
import math
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from kvbench.run import signals

PROJECT = Path(__file__).resolve().parent.parent  # the folder holding kvbench/, allocators/, kernels/
OWN = ("kvbench", "allocators", "kernels")


# -- numbers -----------------------------------------------------------------------------------
def _bounds(above: float | None, at_least: float | None, at_most: float | None) -> str:
    parts = [f"> {above:g}" if above is not None else "", f">= {at_least:g}" if at_least is not None else "",
             f"<= {at_most:g}" if at_most is not None else ""]
    return " and ".join(p for p in parts if p)


def number(text: str | float, unit: str, *, above: float | None = None, at_least: float | None = None,
           at_most: float | None = None, integer: bool = False, infinite: bool = False) -> float:
    """``text`` as a finite number (a whole one with ``integer``; ``infinite``: inf and -inf too, never
    nan) within the bounds; ValueError with one line naming the range and ``unit`` otherwise (the
    caller puts the option's name first)."""
    kind = "a whole number" if integer else "a number other than nan" if infinite else "a finite number"
    wanted = " ".join(p for p in (kind, _bounds(above, at_least, at_most)) if p) + f", in {unit}"
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"must be {wanted}; got {str(text)!r}") from None
    if (math.isnan(value) or (math.isinf(value) and not infinite) or (integer and not value.is_integer())
            or (above is not None and not value > above) or (at_least is not None and not value >= at_least)
            or (at_most is not None and not value <= at_most)):
        raise ValueError(f"must be {wanted}; got {str(text)!r}")
    return int(value) if integer else value


def number_type(unit: str, **bounds) -> Callable[[str], float]:
    """``number`` as an argparse ``type=`` (its error becomes ``argument --opt: must be ...``)."""
    def parse(text: str) -> float:
        try:
            return number(text, unit, **bounds)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "number"  # argparse names the type in some messages
    return parse


finite_positive = number_type("seconds or a count", above=0)  # kvbench-sync --timeout and the like


# -- the parser --------------------------------------------------------------------------------
class _Once:
    """An option action that refuses a second value (``--high 8 --high 16``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        seen = parser.__dict__.setdefault("_given", {})
        shown = f"{values:g}" if isinstance(values, float) else values
        given = option_string if values is None or values == [] else f"{option_string} {shown}"
        if self.dest in seen:
            parser.error(f"{option_string} given twice ({seen[self.dest]}, then {given}); give it once")
        seen[self.dest] = given
        super().__call__(parser, namespace, values, option_string)  # type: ignore[misc]


def _once(action: type[argparse.Action]) -> type[argparse.Action]:
    return type(f"Once{action.__name__}", (_Once, action), {})


class OneLineParser(argparse.ArgumentParser):
    """argparse with the tools' grammar: one-line errors (exit 2), options anywhere among the
    positionals, and no option that takes one value given twice."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name in (None, "store", "store_true", "store_false", "store_const"):
            self.register("action", name, _once(self._registry_get("action", name)))

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message.splitlines()[0] if message else 'bad arguments'}", file=sys.stderr)
        raise SystemExit(2)

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        """Options anywhere: ``allocator=paged --slo X workload.num_requests=20`` reads both overrides."""
        self.__dict__["_given"] = {}
        if any(a.nargs in ("*", "+") for a in self._actions if not a.option_strings):
            return self.parse_intermixed_args(args, namespace)
        return super().parse_args(args, namespace)  # one value per positional: anywhere already


# -- the command's run: signals and warnings -----------------------------------------------------
def _own(path: str) -> bool:
    """Whether a file is the project's own code (not a library's)."""
    try:
        parts = Path(path).resolve().relative_to(PROJECT).parts
    except ValueError:
        return False
    return bool(parts) and parts[0] in OWN


@contextmanager
def quiet_libraries(prog: str) -> Iterator[None]:
    """Library warnings (Hydra's, matplotlib's, pandas') and library log records are dropped;
    the project's own warnings print as one line each, ``<prog>: warning: <message>``."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if _own(filename):
            text = str(message).strip().splitlines()
            print(f"{prog}: warning: {text[0] if text else category.__name__}", file=sys.stderr)

    only_own = logging.Filter()
    only_own.filter = lambda record: record.name.split(".")[0] in (*OWN, "root", "__main__")  # type: ignore[method-assign]
    last = logging.lastResort
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        if last is not None:
            last.addFilter(only_own)
        try:
            yield
        finally:
            if last is not None:
                last.removeFilter(only_own)


def command(prog: str, on_signal: str = "nothing was written") -> Callable:
    """Wrap a tool's ``main(argv) -> int``: a signal ends it in one line, ``<prog>: interrupted;
    <on_signal>``, with 130 (SIGINT) or 143 (SIGTERM); library warnings are dropped. In the
    tool's own process the handlers stay to the end; called from Python they are put back."""
    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            own_process = signals.command_name() is not None
            before = {sig: signal.getsignal(sig) for sig in signals.EXIT_CODES}
            signals.install_run_handlers()
            try:
                with quiet_libraries(prog):
                    code = main(argv)
                if signals.received() is not None:  # a library swallowed the signal on the way
                    raise signals.as_exception(signals.received())
                return code
            except (KeyboardInterrupt, signals.Terminated) as exc:
                signals.note_only()
                print(f"{prog}: {signals.what(exc)}; {on_signal}", file=sys.stderr)
                return signals.exit_code(exc)
            finally:
                if own_process:
                    signals.note_only()
                elif threading.current_thread() is threading.main_thread():  # put the caller's back
                    for sig, handler in before.items():
                        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

        return run
    return wrap


def fail(prog: str, message: str, code: int = 2) -> int:
    """Print the one line of a failed command and return its exit status."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code
