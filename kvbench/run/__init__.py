"""One run and one sweep: the pre-check, the lifecycle, the Hydra job, signals and run directories."""
