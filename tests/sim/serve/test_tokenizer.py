"""``sim serve --tokenizer PATH``: prompts counted by a real tokenizer (a tiny one trained here
with the ``tokenizers`` library and saved as tokenizer.json; nothing is downloaded), token ids
in the body keep priority, and a tokenizer that cannot be read is one error line (exit 2)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import openai
import pytest

from sim.cli.main import main as sim_main
from sim.errors import ConfigError
from sim.serve.prompts import TOKENS_PER_MESSAGE, parse_ask
from sim.serve.tokenizer import load_tokenizer
from tests.sim.serve.conftest import REPO, ServeProcess, write_scenario

CORPUS = ["the quick brown fox jumps over the lazy dog", "a simulated server counts tokens",
          "prefix caching finds the shared system prompt", "hello world"]


@pytest.fixture
def tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path


def test_text_is_counted_by_the_tokenizer(tokenizer_json):
    tok = load_tokenizer(str(tokenizer_json))
    text = "the quick brown fox jumps over the lazy dog " * 7  # 63 words: 63 tokens (4 characters each: 77)
    ask = parse_ask({"prompt": text}, False, 4096, tok)
    assert ask.prompt_tokens == 63 != parse_ask({"prompt": text}, False, 4096).prompt_tokens
    assert load_tokenizer(str(tokenizer_json.parent)).encode(text) == tok.encode(text)  # the folder reads the same
    # token ids keep priority over the text
    ids = parse_ask({"prompt": text, "prompt_token_ids": [5] * 10}, False, 4096, tok)
    assert ids.prompt_tokens == 10
    chat = parse_ask({"messages": [{"role": "system", "content": "hello world"},
                                   {"role": "user", "content": "prefix caching finds the shared system prompt"}]},
                     True, 4096, tok)
    assert chat.prompt_tokens == 2 * TOKENS_PER_MESSAGE + 2 + 7
    # a conversation re-sent with one more turn repeats the earlier tokens: whole chunks shared
    a = parse_ask({"prompt": text}, False, 4096, tok)
    b = parse_ask({"prompt": text + "hello world " * 10}, False, 4096, tok)
    assert a.segments[:3] == b.segments[:3] and a.segments[3] != b.segments[3]


def test_sim_serve_counts_with_it(tmp_path, tokenizer_json):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    server = ServeProcess(scenario, "--tokenizer", str(tokenizer_json), "--time-scale", "4")

    async def client():
        c = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        r = await c.completions.create(model="llama-3-8b", prompt="a simulated server counts tokens", max_tokens=3)
        chat = await c.chat.completions.create(model="llama-3-8b", max_tokens=2,
                                               messages=[{"role": "user", "content": "hello world"}])
        await c.close()
        return r.usage.prompt_tokens, chat.usage.prompt_tokens

    counted = asyncio.run(client())
    status, stderr = server.stop()
    assert status == 0, stderr
    assert counted == (5, TOKENS_PER_MESSAGE + 2)
    assert "prompts counted by tokenizer.json" in server.first_line


def test_unreadable_tokenizers_are_one_line(tmp_path, capsys, monkeypatch):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    assert sim_main(["serve", scenario, "--tokenizer", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --tokenizer: {bad}: not a tokenizer.json") and "\n" not in err
    monkeypatch.setitem(sys.modules, "transformers", None)  # (never a download in a test)
    with pytest.raises(ConfigError, match="needs transformers"):
        load_tokenizer(str(tmp_path / "no-such-model"))


def test_without_the_package_it_says_what_to_install(tmp_path, tokenizer_json):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    code = ("import sys; sys.modules['tokenizers'] = None\n"
            "from sim.cli.main import main; sys.exit(main(['serve', sys.argv[1], '--tokenizer', sys.argv[2]]))")
    proc = subprocess.run([sys.executable, "-c", code, scenario, str(tokenizer_json)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs the tokenizers package: pip install 'kvsim[serve]'" in lines[0]


def test_a_chat_template_that_refuses_is_a_400():
    from sim.serve.prompts import BadRequest
    from sim.serve.tokenizer import Tokenizer

    def template(messages):
        raise ValueError("Conversation roles must alternate user/assistant")

    tok = Tokenizer("t", lambda text: [1] * len(text.split()), template)
    with pytest.raises(BadRequest, match="chat template refused the messages: Conversation roles") as err:
        parse_ask({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, True, 4096, tok)
    assert err.value.status == 400 and err.value.param == "messages"
    assert parse_ask({"prompt": "one two three"}, False, 4096, tok).prompt_tokens == 3  # (text: no template)
