"""A helper process for tests/app/test_class.py: says a line, then takes ~300 MB and waits (the server's side
ends it when it outgrows its bound). Plain Python: a child that imported JAX would take seconds to start."""

import json
import sys
import time

if __name__ == "__main__":
    sys.stdin.read()
    print(json.dumps({"done": 0}), flush=True)
    held = b"\x01" * 300_000_000  # written, so resident
    print(json.dumps({"done": 1}), flush=True)
    time.sleep(30)
