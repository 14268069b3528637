"""kvbench: KV-cache allocation strategies measured under LLM serving workloads."""
import sys as _sys

if _sys.argv and _sys.argv[0].rsplit("/", 1)[-1].startswith("kvbench") or any(
        a.startswith("kvbench.") for a in _sys.orig_argv[1:3]):  # maybe a command that runs work
    from kvbench.run import signals as _signals  # first: a signal now is one line

    if _signals.command_name() is not None:
        _signals.install_startup_handlers()
