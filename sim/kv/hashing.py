"""Chained hashes of full KV blocks, computed from a request's symbolic token segments.

Block ``i`` covers tokens ``[i*B, (i+1)*B)``; its hash folds in the previous block's hash,
so equal hashes mean equal *prefixes*, not just equal blocks (vLLM's prefix-cache key).
A block's content is the list of segment pieces ``(segment_id, offset, length)`` it
covers. Python's ``hash`` of tuples of ints is deterministic across runs.
"""

from __future__ import annotations

from sim.request import Request


def extend_block_hashes(req: Request, num_full_blocks: int, block_size: int) -> list[int]:
    """Make ``req.block_hashes`` cover at least ``num_full_blocks`` blocks; return it.

    Only blocks whose tokens are all known are hashed (callers ask for no more).
    """
    hashes = req.block_hashes
    start_block = len(hashes)
    if num_full_blocks <= start_block:
        return hashes
    pos = start_block * block_size  # first token to hash
    end = num_full_blocks * block_size
    prompt = req.num_prompt_tokens
    if prompt <= pos and end <= prompt + req.num_generated:  # blocks of output only (decodes)
        seg = req.output_segment  # each block one piece: the loop below's, without the walk
        prev = hashes[-1] if hashes else 0
        while pos < end:
            prev = hash((prev, ((seg, pos - prompt, block_size),)))
            hashes.append(prev)
            pos += block_size
        return hashes
    seg_start = 0
    pieces: list[tuple[int, int, int]] = []
    prev = hashes[-1] if hashes else 0
    block_end = pos + block_size
    for seg_id, seg_len in req.segments():
        seg_end = seg_start + seg_len
        while pos < end and pos < seg_end:
            take = min(seg_end, block_end) - pos
            pieces.append((seg_id, pos - seg_start, take))
            pos += take
            if pos == block_end:
                prev = hash((prev, tuple(pieces)))
                hashes.append(prev)
                pieces = []
                block_end += block_size
        seg_start = seg_end
        if pos >= end:
            break
    return hashes
