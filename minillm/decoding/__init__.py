"""Decoding strategies (解码策略): how the next token is chosen from the model's logits.

    config.py       GenerationConfig: the options, with transformers' names, each checked by
                    one check (CHECKS) that the processors and the server run too
    processors.py   one small class per rule (temperature, top-k, top-p, min-p, repetition,
                    presence and frequency penalties, no-repeat n-gram, bad words) and
                    build_processors, which chains them
    sampling.py     choose_next_token: greedy argmax or a seeded draw
    beam_search.py  beam_search: num_beams candidate sequences, as transformers runs it
    json_grammar.py JSONGrammar: JSON text for a small JSON Schema subset, byte by byte
    json_constraint.py
                    JSONConstraint: a processor that lets only schema-valid JSON through
    json_lark.py, llguidance_constraint.py, grammar_backend.py
                    the same constraint with its masks from llguidance (optional), and
                    make_json_constraint(..., backend=...), which chooses
    vocabulary.py   each token's bytes, and the vocabulary as a trie

`minillm.generate` (minillm/generation/loop.py) runs the loop and uses these pieces.
"""

from .beam_search import Hypothesis, beam_search
from .config import GenerationConfig, IgnoredSamplingOptionsWarning
from .grammar_backend import GRAMMAR_BACKENDS, make_json_constraint
from .json_constraint import JSONConstraint, SchemaError
from .processors import (BadWordsProcessor, FrequencyPenaltyProcessor, MinNewTokensProcessor,
                         MinPProcessor, NoRepeatNGramProcessor, PresencePenaltyProcessor, ProcessorList,
                         RepetitionPenaltyProcessor, TemperatureProcessor, TopKProcessor,
                         TopPProcessor, bad_words_ids, build_processors)
from .sampling import choose_next_token, make_generator

__all__ = [
    "GenerationConfig", "IgnoredSamplingOptionsWarning", "build_processors", "choose_next_token",
    "make_generator", "beam_search",
    "Hypothesis", "ProcessorList", "TemperatureProcessor", "TopKProcessor", "TopPProcessor",
    "MinPProcessor", "RepetitionPenaltyProcessor", "NoRepeatNGramProcessor", "BadWordsProcessor",
    "bad_words_ids", "PresencePenaltyProcessor", "FrequencyPenaltyProcessor", "JSONConstraint",
    "SchemaError", "GRAMMAR_BACKENDS", "make_json_constraint", "MinNewTokensProcessor",
]
