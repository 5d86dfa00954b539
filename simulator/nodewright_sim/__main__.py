import sys

from nodewright_sim.cli import main

sys.exit(main())
