"""Entry point of the sitting server (:mod:`shardlab.evaluate.sitting`): ``python -m
shardlab.evaluate.sitting_server FD`` serves sittings on the inherited connection FD."""

import sys

from shardlab.evaluate.sitting import serve

if __name__ == "__main__":
    serve(int(sys.argv[1]))
