import sys

from .cli.main import main

if __name__ == "__main__":  # not when a worker process of the search imports it
    sys.exit(main())
