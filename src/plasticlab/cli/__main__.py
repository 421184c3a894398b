"""``python -m plasticlab.cli …``: the ``plasticlab`` command."""

import sys

from . import main

sys.exit(main())
