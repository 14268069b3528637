"""The researcher's commands over runs and results: kvbench-plot, kvbench-report, kvbench-capacity."""
