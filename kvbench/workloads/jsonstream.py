"""Read the elements of a top-level JSON array one at a time, stopping cleanly at a torn tail.

The packaged ShareGPT file is cut short mid-record, so ``json.load`` fails on it. This reader
decodes one element at a time with ``JSONDecoder.raw_decode`` over a sliding text buffer, yields
every complete element, and when the file ends inside an element (or the array is never
closed) it stops and records how much text it ignored.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

_WHITESPACE = " \t\n\r"


class JsonArrayError(ValueError):
    """The file is not a JSON array at all (as opposed to a complete array with a torn tail)."""


class JsonArrayReader:
    """Iterate over the complete elements of the JSON array in ``path``.

    After iteration: ``num_elements`` (complete elements yielded), ``torn`` (True when the file
    ended before the array was closed) and ``ignored_chars`` (text after the last complete
    element that could not be decoded; 0 for a well-formed file).
    """

    def __init__(self, path: str | Path, chunk_chars: int = 1 << 20) -> None:
        self.path = Path(path)
        self.chunk_chars = chunk_chars
        self.num_elements = 0
        self.torn = False
        self.ignored_chars = 0

    def __iter__(self) -> Iterator[object]:
        decoder = json.JSONDecoder()
        # errors="replace": a torn multi-byte character can only sit in the torn tail.
        with open(self.path, encoding="utf-8", errors="replace", newline="") as f:
            buf, pos, eof = "", 0, False

            def fill(min_extra: int) -> None:
                """Drop consumed text and read at least ``min_extra`` more chars unless EOF."""
                nonlocal buf, pos, eof
                buf = buf[pos:]
                pos = 0
                while not eof and min_extra > 0:
                    chunk = f.read(max(self.chunk_chars, min_extra))
                    if not chunk:
                        eof = True
                    buf += chunk
                    min_extra -= len(chunk)

            def next_char() -> str:
                """Skip whitespace; return the next char without consuming it ('' at EOF)."""
                nonlocal pos
                while True:
                    while pos < len(buf) and buf[pos] in _WHITESPACE:
                        pos += 1
                    if pos < len(buf):
                        return buf[pos]
                    if eof:
                        return ""
                    fill(self.chunk_chars)

            first = next_char()
            if first != "[":
                raise JsonArrayError(f"{self.path}: not a JSON array (starts with {first!r})")
            pos += 1
            expect_comma = False
            while True:
                ch = next_char()
                if ch == "":  # the array was never closed: torn right between two elements
                    self.torn = True
                    return
                if ch == "]":
                    return
                if expect_comma:
                    if ch != ",":
                        raise JsonArrayError(f"{self.path}: expected ',' between elements, got {ch!r}")
                    pos += 1
                    if next_char() == "":
                        self.torn = True
                        return
                # Decode one element; on failure read more text (doubling) and retry until EOF.
                want = self.chunk_chars
                while True:
                    try:
                        value, end = decoder.raw_decode(buf, pos)
                    except json.JSONDecodeError:
                        end = -1
                    # A scalar ending exactly at the buffer edge may continue in the next chunk.
                    if end != -1 and (end < len(buf) or eof):
                        break
                    if eof:
                        self.torn = True
                        self.ignored_chars = len(buf) - pos
                        return
                    fill(want)
                    want *= 2
                pos = end
                self.num_elements += 1
                expect_comma = True
                yield value
