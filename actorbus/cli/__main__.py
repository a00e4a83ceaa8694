import sys

from actorbus.cli.main import main

sys.exit(main())
