"""``python -m kvbench.results``: the kvbench-results command."""
import sys

from kvbench.results.store import main

sys.exit(main())
