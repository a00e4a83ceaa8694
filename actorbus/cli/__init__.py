"""The ``actorbus`` command, one module per command group (see ``main``)."""

from actorbus.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
