"""``python -m jaxwarp ...`` is the ``jaxwarp`` command."""

import sys

from jaxwarp.cli import main

sys.exit(main())
