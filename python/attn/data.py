"""attn.data: tokenizers (include/attn/bpe.h, include/attn/tokenizer.h).

BpeTokenizer is GPT-2's byte-level BPE read from a Hugging Face vocab.json and merges.txt:
``BpeTokenizer.from_files("vocab.json", "merges.txt")``; ``encode(text)`` gives the ids of
transformers' GPT2Tokenizer, ``decode(ids)`` the text (invalid UTF-8 replaced by U+FFFD, as
transformers does; ``decode_bytes`` gives the raw bytes).

Tokenizer reads a Hugging Face tokenizer.json (Llama 3, Qwen, Gemma, Llama 2 kinds) with the
names of the ``tokenizers`` package: ``Tokenizer.from_file(path)``, ``encode(text,
add_special_tokens=True)`` giving an Encoding with ``ids`` and ``tokens``, ``decode(ids,
skip_special_tokens=True)``, ``token_to_id``, ``id_to_token`` (None when no token has the id),
``get_vocab_size()``."""

from ._C.data import BpeTokenizer
from ._C.data import Tokenizer as _Tokenizer

__all__ = ["BpeTokenizer", "Encoding", "Tokenizer"]


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
