"""Request bodies to the simulated engine's prompts (sim/serve/prompts.py)."""

from __future__ import annotations

import pytest

from sim.serve.prompts import CHARS_PER_TOKEN, CHUNK_TOKENS, TOKENS_PER_MESSAGE, BadRequest, parse_ask


def test_token_ids_count_exactly_and_text_is_estimated():
    ask = parse_ask({"prompt_token_ids": list(range(1, 101)), "max_tokens": 7}, chat=False, max_model_len=4096)
    assert ask.prompt_tokens == 100 and ask.max_tokens == 7 and not ask.stream
    ask = parse_ask({"prompt": "x" * 401}, chat=False, max_model_len=4096)
    assert ask.prompt_tokens == -(-401 // CHARS_PER_TOKEN)
    assert ask.max_tokens == 16  # the OpenAI API's default for completions
    chat = parse_ask({"messages": [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "u" * 80}]},
                     chat=True, max_model_len=4096)
    assert chat.prompt_tokens == (40 + 80) // CHARS_PER_TOKEN + 2 * TOKENS_PER_MESSAGE
    assert chat.max_tokens == 4096 - chat.prompt_tokens  # chat: the rest of the context, as vLLM


def test_shared_prefixes_share_segments_to_the_chunk():
    system = {"role": "system", "content": "You are helpful. " * 40}
    a = parse_ask({"messages": [system, {"role": "user", "content": "first question"}]}, True, 4096)
    b = parse_ask({"messages": [system, {"role": "user", "content": "another one"}]}, True, 4096)
    shared = 0
    for (sa, _), (sb, _) in zip(a.segments, b.segments):
        if sa != sb:
            break
        shared += 1
    chunk_chars = CHUNK_TOKENS * CHARS_PER_TOKEN
    # the texts agree up to the user message's content (after both messages' role markers)
    first_difference = 2 * TOKENS_PER_MESSAGE * CHARS_PER_TOKEN + len(system["content"])
    assert shared == first_difference // chunk_chars  # every whole chunk before it
    ids = list(range(1, 65))
    x = parse_ask({"prompt_token_ids": ids + [7] * 20}, False, 4096)
    y = parse_ask({"prompt_token_ids": ids + [9] * 20}, False, 4096)
    assert x.segments[:4] == y.segments[:4] and x.segments[4] != y.segments[4]


@pytest.mark.parametrize("body, param", [
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "n": 2}, "n"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt_token_ids": ["x"]}, "prompt_token_ids"),
    ({"prompt": "hi", "max_tokens": 5000}, "max_tokens"),
    ({"prompt": "y" * 4 * 5000}, "prompt"),
    ({"prompt": "hi", "stream": "yes"}, "stream"),
])
def test_bad_bodies_name_the_field(body, param):
    with pytest.raises(BadRequest) as err:
        parse_ask(body, chat=False, max_model_len=4096)
    assert err.value.param == param and err.value.status == 400
