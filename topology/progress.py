"""Progress notes for work that can take seconds (a large graph, an explanation of why
nothing fits, a layout search), through stdlib logging on the logger 'trainplan.progress'.

Library code only calls `note`; nothing is printed unless a front end attaches a handler
(the CLI does, on a terminal and without --quiet). Lives in topology so that every layer
(topology <- solver <- service) can use it.
"""
from __future__ import annotations

import logging

LOGGER = logging.getLogger("trainplan.progress")


def note(message: str, *args: object) -> None:
    """One progress line (%-style args, formatted only when someone listens)."""
    LOGGER.info(message, *args)
