import sys

from shardlab.cli import main

sys.exit(main())
