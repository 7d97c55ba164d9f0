"""``python -m tools.loadtest``: run the load test (:func:`tools.loadtest.cli.main`)."""

import sys

from tools.loadtest.cli import main

if __name__ == "__main__":
    sys.exit(main())
