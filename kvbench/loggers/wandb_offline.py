"""Read an offline W&B run back from its transaction log (``run-<id>.wandb``).

wandb 0.31 writes offline runs only as that log (no wandb-summary.json or config.yaml until
``wandb sync``) and ships no Python reader for it. The log is LevelDB's log format
(https://github.com/google/leveldb/blob/main/doc/log_format.md) after a 7-byte header
(``:W&B``, magic 0xBEE1, version 0): 32 KiB blocks of chunks, each chunk a 7-byte header
(CRC-32 of type byte + data, length, type FULL/FIRST/MIDDLE/LAST) and data; a block's tail
shorter than a chunk header is zero padding. Each reassembled record is a serialized
``wandb_internal_pb2.Record``.

Used by the tests and handy for checking an offline run without uploading it.
"""
from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_FILE_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32, length, type
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """What an offline run recorded: config and summary as last set, history rows in order."""

    run_id: str = ""
    project: str = ""
    name: str = ""
    group: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # define_metric records
    exit_code: int | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # name, type, files


def iter_records(path: str | Path) -> Iterator[bytes]:
    """Yield the raw records of a W&B transaction log; stops at a torn tail. Raises ValueError
    on a bad file header or a checksum mismatch."""
    data = Path(path).read_bytes()
    ident, magic, _version = _FILE_HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a W&B transaction log")
    pos, pending = _FILE_HEADER.size, b""
    while pos + _CHUNK_HEADER.size <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _CHUNK_HEADER.size:  # block trailer
            pos += room
            continue
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:  # zero padding to the end of the block
            pos += room
            continue
        body = data[pos + _CHUNK_HEADER.size : pos + _CHUNK_HEADER.size + length]
        if len(body) < length:
            return
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(f"{path}: checksum mismatch at byte {pos}")
        pos += _CHUNK_HEADER.size + length
        if kind == _FULL:
            yield body
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            yield pending + body
            pending = b""


def _key(item) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def read_offline_run(run_path: str | Path, wait_s: float = 10.0) -> OfflineRun:
    """Parse ``run_path`` (an ``offline-run-*`` directory or its ``.wandb`` file).

    wandb's writer process may still be flushing a run that just finished: wait up to
    ``wait_s`` seconds for its exit record before returning what is there.
    """
    deadline = time.monotonic() + wait_s
    while True:
        run = _read_offline_run(run_path)
        if run.exit_code is not None or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def _read_offline_run(run_path: str | Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb  # optional dependency: wandb

    run_path = Path(run_path)
    log = run_path if run_path.suffix == ".wandb" else next(run_path.glob("run-*.wandb"))
    out = OfflineRun()
    for raw in iter_records(log):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            # wandb may write more than one run record; later ones can leave fields empty
            out.run_id = run.run_id or out.run_id
            out.project = run.project or out.project
            out.name = run.display_name or out.name
            out.group = run.run_group or out.group
            out.tags = list(run.tags) or out.tags
            for item in run.config.update:
                out.config[_key(item)] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                out.config[_key(item)] = json.loads(item.value_json)
            for item in record.config.remove:
                out.config.pop(_key(item), None)
        elif kind == "history":
            out.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                out.summary[_key(item)] = json.loads(item.value_json)
            for item in record.summary.remove:
                out.summary.pop(_key(item), None)
        elif kind == "metric":
            m = record.metric
            out.metrics.append(
                {"name": m.name or m.glob_name, "glob": bool(m.glob_name), "step_metric": m.step_metric}
            )
        elif kind == "artifact":
            art = record.artifact
            files = [entry.path for entry in art.manifest.contents]
            out.artifacts.append({"name": art.name, "type": art.type, "files": files})
        elif kind == "exit":
            out.exit_code = record.exit.exit_code
    out.config.pop("_wandb", None)
    return out
