"""Pieces the hf test modules share: one torch thread per module, and a script run under the
Triton interpreter in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: a second intra-op thread only adds synchronisation (and stalls on a shared CPU).
    A module that imports this fixture runs on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def interpreted(script: Path, timeout: float = 600):
    """Run ``script`` with ``TRITON_INTERPRET=1`` (it must be set before triton is imported, so a
    fresh process) from the repository root; its last line of output, parsed as JSON."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
