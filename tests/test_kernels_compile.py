"""The Triton kernels compile for sm_90 (H100/H200) on a machine without a GPU.

The interpreter runs the kernels' arithmetic but never builds Triton IR, so a kernel can pass every
CPU test and still fail to compile. ``python -m kernels.aot`` runs the real compiler down to a cubin
(Triton ships ptxas) and checks shared memory; it needs TRITON_INTERPRET unset, hence a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
pytestmark = pytest.mark.skipif(not PTXAS.exists(), reason="triton without its CUDA backend")


def _aot(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "kernels.aot", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_headline_variants_compile_for_sm90():
    result = _aot("--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all variants compiled" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["90", "80"])
def test_every_variant_compiles(arch):
    result = _aot("--arch", arch)
    assert result.returncode == 0, result.stdout + result.stderr
