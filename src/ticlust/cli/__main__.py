"""``python -m ticlust.cli``: the ``ticlust`` command."""
import sys

from . import main

if __name__ == "__main__":      # not when a spawned worker process re-imports the main module
    sys.exit(main())
