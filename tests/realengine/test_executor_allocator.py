"""The step executor reads block tables through the allocator interface: paged only."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from realengine.executor import StepExecutor  # noqa: E402
from sim.kv.contiguous import ContiguousAllocator  # noqa: E402


@pytest.mark.parametrize("exact", [False, True])
def test_a_contiguous_allocator_is_refused(exact) -> None:
    with pytest.raises(ValueError, match="block-table allocator"):
        StepExecutor(None, ContiguousAllocator(176, 80, exact=exact), 16)  # type: ignore[arg-type]
