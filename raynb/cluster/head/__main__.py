"""``python -m raynb.cluster.head``: run a head (``raynb start`` does this)."""

import sys

from .main import main

sys.exit(main())
