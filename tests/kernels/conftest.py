"""Kernel tests run on CPU through Triton's interpreter.

TRITON_INTERPRET must be set before triton is first imported, hence at the top of this
conftest. Without torch or triton installed the whole directory is skipped.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("triton")
