"""`python -m experiments.board`: Omniboard on the run records."""

import sys

from experiments.board import main

sys.exit(main())
