"""``python -m devtools.docgen`` (from the repository root): rewrite, or ``--check``, the generated docs."""

import sys

from devtools.docgen import main

sys.exit(main())
