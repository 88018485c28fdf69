"""``python -m ttlpolicy``: the ``ttlpolicy`` command."""

import sys

from .cli import main

sys.exit(main())
