"""The class warm-up's child process: ``python -m sharding_lab.server.warm_child``, started by the server's warm-up
(:func:`sharding_lab.server.warm._warm_in_child`) with the layouts to compile on its standard input."""

import sys

from sharding_lab.server.warm import child_main

if __name__ == "__main__":
    sys.exit(child_main())
