"""The `kvbench` command (``python -m kvbench.app``): the run itself lives in ``kvbench/run/``.

``kvbench.run.job.main`` checks the whole command line first (one line and exit 2 on bad input,
nothing written), then hands it to Hydra, which calls ``hydra_task`` once per job. Hydra names a
job, and its log file ``app.log``, after the module of that function: hence it lives here.
"""
from __future__ import annotations

import sys

if __name__ == "__main__" or sys.argv[0].endswith("/kvbench"):  # the kvbench process: before the imports
    from kvbench.run.signals import install_startup_handlers  # (kvbench/__init__ did it already when it could tell)

    install_startup_handlers()

from omegaconf import DictConfig  # noqa: E402

from kvbench.run import job  # noqa: E402


def hydra_task(cfg: DictConfig) -> float | None:
    """The ``@hydra.main`` function: one job, start to end (``kvbench.run.job``)."""
    return job.hydra_job(cfg)


def main() -> None:
    job.main(hydra_task)


if __name__ == "__main__":
    main()
