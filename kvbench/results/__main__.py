"""``python -m kvbench.results``: the kvbench-results command."""
import sys

from kvbench.results.cli import main

sys.exit(main())
