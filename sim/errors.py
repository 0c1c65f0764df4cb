"""One error type for every bad input, so the CLI can print one line and exit 2."""

from __future__ import annotations

import sys
from typing import Callable


class ConfigError(Exception):
    """Bad user input: which file, which key path, what is wrong and what is allowed.

    ``str(err)`` is ``"<file>: <key.path>: <message>"``; the CLI prefixes ``error: ``.
    """

    def __init__(self, file: str, key: str, message: str) -> None:
        super().__init__(f"{file}: {key}: {message}")
        self.file = file
        self.key = key
        self.message = message


def cli_exit_code(command: Callable[[], int]) -> int:
    """Run one CLI command: bad input ends in one ``error: ...`` line on stderr and status
    2, Ctrl-C in status 130; never a traceback for either."""
    try:
        return command()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
