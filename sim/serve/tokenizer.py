"""``sim serve --tokenizer PATH``: prompts counted (and their prefixes identified) by a real
tokenizer instead of the characters estimate (sim/serve/prompts.py).

``PATH`` is a ``tokenizer.json`` file, or a folder holding one (a HuggingFace model folder):
read with the ``tokenizers`` package (the ``serve`` extra). A folder without a
``tokenizer.json``, or a model id, is read with ``transformers``' ``AutoTokenizer`` when it
is installed (it may then fetch the id from the Hub, as vLLM would). Chat messages go
through the tokenizer's chat template where it has one (``transformers``); otherwise each
message is :data:`~sim.serve.prompts.TOKENS_PER_MESSAGE` marker tokens (its role's) and its
content's tokens, so a conversation re-sent with one more turn repeats the earlier tokens.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sim.errors import ConfigError

FLAG = "--tokenizer"


def _role_ids(role: str, n: int) -> list[int]:
    """``n`` stand-in token ids for a chat message's role markers (the same for a role)."""
    digest = hashlib.blake2b(role.encode(), digest_size=4 * n).digest()
    return [int.from_bytes(digest[4 * i:4 * i + 4], "little") for i in range(n)]


class Tokenizer:
    """``encode(text)`` and ``chat(messages)`` as token ids."""

    def __init__(self, name: str, encode, template=None) -> None:
        self.name = name
        self._encode = encode
        self._template = template

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def chat(self, messages: list[tuple[str, str]], markers: int) -> list[int]:
        """The prompt of ``messages`` ((role, content) pairs) as token ids."""
        if self._template is not None:
            return list(self._template([{"role": r, "content": c} for r, c in messages]))
        ids: list[int] = []
        for role, content in messages:
            ids += _role_ids(role, markers)
            ids += self._encode(content)
        return ids


def _from_json(path: Path) -> Tokenizer:
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise ConfigError(FLAG, str(path), "reading a tokenizer.json needs the tokenizers package: "
                                           "pip install 'kvsim[serve]'") from None
    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as e:  # the library's own error: a bad file  # noqa: BLE001
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(FLAG, str(path), f"not a tokenizer.json the tokenizers package can read ({first})") from None
    return Tokenizer(path.name, lambda text: tok.encode(text, add_special_tokens=False).ids)


def _from_transformers(spec: str) -> Tokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError(FLAG, spec, "not a tokenizer.json nor a folder holding one; a model id or a folder "
                                      "without tokenizer.json needs transformers: pip install transformers") from None
    try:
        tok = AutoTokenizer.from_pretrained(spec)
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(FLAG, spec, f"transformers could not load a tokenizer from it ({first})") from None
    template = None
    if getattr(tok, "chat_template", None):
        def template(messages):
            return tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return Tokenizer(spec, lambda text: tok.encode(text, add_special_tokens=False), template)


def load_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer ``--tokenizer spec`` names; one ConfigError line if it cannot be read."""
    path = Path(spec).expanduser()
    if path.is_file():
        return _from_json(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return _from_json(path / "tokenizer.json")
    return _from_transformers(spec)
