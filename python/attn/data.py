"""attn.data: tokenizers (include/attn/bpe.h, include/attn/tokenizer.h).

BpeTokenizer is GPT-2's byte-level BPE read from a Hugging Face vocab.json and merges.txt:
``BpeTokenizer.from_files("vocab.json", "merges.txt")``; ``encode(text)`` gives the ids of
transformers' GPT2Tokenizer, ``decode(ids)`` the text (invalid UTF-8 replaced by U+FFFD, as
transformers does; ``decode_bytes`` gives the raw bytes).

Tokenizer reads a Hugging Face tokenizer.json (Llama 3, Qwen, Gemma, Llama 2 kinds) with the
names of the ``tokenizers`` package: ``Tokenizer.from_file(path)``, ``encode(text,
add_special_tokens=True)`` giving an Encoding with ``ids`` and ``tokens``, ``decode(ids,
skip_special_tokens=True)``, ``token_to_id``, ``id_to_token`` (None when no token has the id),
``get_vocab_size()``.

ChatTemplate renders the Jinja chat template of a tokenizer_config.json as transformers'
apply_chat_template does (include/attn/chat_template.h for the subset):
``ChatTemplate(source).render(messages=[...], add_generation_prompt=True, bos_token="<s>")``;
``ChatTemplate.from_tokenizer_config(path)`` reads the template and the bos/eos tokens."""

import json as _json

from ._C.data import BpeTokenizer
from ._C.data import ChatTemplate as _ChatTemplate
from ._C.data import Tokenizer as _Tokenizer

__all__ = ["BpeTokenizer", "ChatTemplate", "Encoding", "Tokenizer"]


class Encoding:
    """What Tokenizer.encode gives: the ids and their tokens."""

    __slots__ = ("ids", "tokens")

    def __init__(self, ids, tokens):
        self.ids = ids
        self.tokens = tokens

    def __len__(self):
        return len(self.ids)

    def __repr__(self):
        return "Encoding(num_tokens={})".format(len(self.ids))


class Tokenizer:
    """A Hugging Face tokenizer.json, run in C++ (attn::data::Tokenizer)."""

    def __init__(self, impl):
        if not isinstance(impl, _Tokenizer):
            raise TypeError("Tokenizer: use Tokenizer.from_file(path) or Tokenizer.from_str(json)")
        self._impl = impl

    @classmethod
    def from_file(cls, path):
        return cls(_Tokenizer.from_file(str(path)))

    @classmethod
    def from_str(cls, json):
        return cls(_Tokenizer.from_str(json))

    def get_vocab_size(self, with_added_tokens=True):
        return self._impl.vocab_size

    def token_to_id(self, token):
        return self._impl.token_to_id(token)

    def id_to_token(self, id):
        try:
            return self._impl.id_to_token(int(id))
        except IndexError:
            return None

    def encode(self, sequence, add_special_tokens=True):
        if not isinstance(sequence, str):
            raise TypeError("Tokenizer.encode: expected a str, got {}".format(
                type(sequence).__name__))
        return Encoding(*self._impl.encode_with_tokens(sequence, add_special_tokens))

    def encode_batch(self, inputs, add_special_tokens=True):
        return [self.encode(s, add_special_tokens) for s in inputs]

    def decode(self, ids, skip_special_tokens=True):
        return self._impl.decode([int(i) for i in ids], skip_special_tokens)

    def decode_batch(self, sequences, skip_special_tokens=True):
        return [self.decode(s, skip_special_tokens) for s in sequences]


class ChatTemplate:
    """A chat template, rendered in C++ (attn::data::ChatTemplate)."""

    def __init__(self, source, name="chat_template"):
        self._impl = _ChatTemplate(source, name)
        self.bos_token = ""
        self.eos_token = ""

    @classmethod
    def from_tokenizer_config(cls, path):
        """The chat_template of a tokenizer_config.json (a string, or the list entry named
        "default"), with its bos_token and eos_token."""
        with open(path, encoding="utf-8") as f:
            config = _json.load(f)
        source = config.get("chat_template")
        if isinstance(source, list):
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if not isinstance(source, str):
            raise ValueError("ChatTemplate: '{}' has no chat_template".format(path))
        self = cls(source, "{}: chat_template".format(path))

        def token(key):
            t = config.get(key)
            return t.get("content", "") if isinstance(t, dict) else (t or "")
        self.bos_token, self.eos_token = token("bos_token"), token("eos_token")
        return self

    def render(self, **context):
        """The template with `context` as its variables (messages, add_generation_prompt, tools,
        ...; JSON values). bos_token and eos_token default to the tokenizer_config's."""
        context.setdefault("bos_token", self.bos_token)
        context.setdefault("eos_token", self.eos_token)
        return self._impl.render_json(_json.dumps(context))
