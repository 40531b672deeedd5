"""attn.data: tokenizers (include/attn/data.h, include/attn/bpe.h).

BpeTokenizer is GPT-2's byte-level BPE read from a Hugging Face vocab.json and merges.txt:
``BpeTokenizer.from_files("vocab.json", "merges.txt")``; ``encode(text)`` gives the ids of
transformers' GPT2Tokenizer, ``decode(ids)`` the text (invalid UTF-8 replaced by U+FFFD, as
transformers does; ``decode_bytes`` gives the raw bytes)."""

from ._C.data import BpeTokenizer

__all__ = ["BpeTokenizer"]
