"""Allow ``python -m cephnode_exporter``."""

import sys

from cephnode_exporter.cli import main

sys.exit(main())
