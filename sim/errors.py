"""One error type for every bad input, so the CLI can print one line and exit 2."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad user input: which file, which key path, what is wrong and what is allowed.

    ``str(err)`` is ``"<file>: <key.path>: <message>"``; the CLI prefixes ``error: ``.
    """

    def __init__(self, file: str, key: str, message: str) -> None:
        super().__init__(f"{file}: {key}: {message}")
        self.file = file
        self.key = key
        self.message = message
