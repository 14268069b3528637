"""The console scripts' shared contract: a bad argument or file is one stderr line, exit 2.

``OneLineParser`` is an ``argparse.ArgumentParser`` whose usage errors print
``<prog>: error: <what>`` on one line (argparse prints the usage block first) and exit 2.
``finite_positive`` is the ``type=`` of a number of seconds or a count that must be > 0.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message.splitlines()[0] if message else 'bad arguments'}", file=sys.stderr)
        raise SystemExit(2)


def finite_positive(text: str) -> float:
    """A finite number > 0 (argparse's type=float takes nan, inf and -1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0; got {text!r}")
    return value


def fail(prog: str, message: str, code: int = 2) -> int:
    """Print the one line of a failed command and return its exit status."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code
