"""kvbench: KV-cache allocation strategies measured under LLM serving workloads."""
import sys as _sys

if _sys.argv[0].endswith("/kvbench") or "kvbench.app" in _sys.orig_argv[1:3]:  # the kvbench process
    from kvbench.run.signals import install_startup_handlers as _install  # first: a signal now is one line

    _install()
