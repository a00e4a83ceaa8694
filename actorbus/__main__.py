"""``python -m actorbus``: the same as the ``actorbus`` console script."""

import sys

from actorbus.cli import main

sys.exit(main())
