"""minillm's byte-level BPE tokenizer (chapter 01), in small files:

    bytes_unicode  the 256 bytes <-> printable characters table vocabularies are written in
    pretokenize    the regex that cuts text into words before BPE
    bpe            pair counts, merging a pair, encoding with a list of merges
    train          learning merges from a text
    tokenizer      the Tokenizer: encode, decode, special tokens, save
    streaming      the incremental decoder for generated tokens
    chat           chat templates
    gguf_vocab     the vocabulary stored in a GGUF file's metadata
    hf_json        a Hugging Face tokenizer.json
    load           load_tokenizer(name_or_path)
    samples        the test strings and the training corpus of the chapter
"""

from .bpe import bpe_word, encode_with_merges, merge_pair, pair_counts
from .bytes_unicode import bytes_to_token, bytes_to_unicode, token_to_bytes
from .chat import CHATML_TEMPLATE, chatml
from .gguf_vocab import GGUFMetadataError, read_gguf_metadata
from .load import load_tokenizer
from .pretokenize import GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN, PreTokenizer
from .streaming import StreamDecoder
from .tokenizer import Tokenizer
from .train import DEFAULT_SPECIAL_TOKENS, learn_merges, train, train_simple

__all__ = [
    "CHATML_TEMPLATE", "DEFAULT_SPECIAL_TOKENS", "GGUFMetadataError", "GPT2_PATTERN",
    "LLAMA3_PATTERN", "PreTokenizer", "QWEN2_PATTERN", "StreamDecoder", "Tokenizer",
    "bpe_word", "bytes_to_token", "bytes_to_unicode", "chatml", "encode_with_merges",
    "learn_merges", "load_tokenizer", "merge_pair", "pair_counts", "read_gguf_metadata",
    "token_to_bytes", "train", "train_simple",
]
