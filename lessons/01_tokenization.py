# %% [markdown]
# # 01 · Tokenization: from text to token ids and back
#
# A language model never sees letters. It sees a list of integers, **token ids**, each standing
# for a piece of text called a **token** (词元). Turning text into tokens is **tokenization**
# (分词); the program that does it is the **tokenizer** (分词器).
#
# In this chapter we build minillm's own tokenizer, a **byte-level BPE** (字节级字节对编码), the
# kind GPT-2, Llama 3, Qwen2 and our course model SmolLM2 use, and check that it gives *exactly*
# the ids of the real one. The steps:
#
# 1. text → UTF-8 bytes
# 2. byte-pair encoding (BPE) step by step, then trained on a corpus
# 3. why Chinese costs SmolLM2 so many tokens, measured
# 4. special tokens and the chat template
# 5. streaming decoding, WordPiece compared with BPE, parity and speed against the real tokenizer

# %%
import os
import time

import matplotlib.pyplot as plt
from IPython.display import HTML, display

import minillm
from minillm.course import show_source
from minillm.tokenizer import merge_pair, pair_counts, train
from minillm.tokenizer.samples import corpus

CI = bool(os.environ.get("CI"))  # smaller sizes when the notebook runs in the test suite

# %% [markdown]
# ## 1 · Text is bytes
#
# Unicode gives every character a number (its code point); UTF-8 writes each code point as one to
# four **bytes**. ASCII letters take one byte, most Chinese characters three, emoji four.

# %%
for ch in ["a", "é", "你", "👋"]:
    data = ch.encode("utf-8")
    print(f"{ch!r}: code point U+{ord(ch):04X}, UTF-8 bytes {list(data)} ({len(data)} bytes)")

# %% [markdown]
# A byte-level tokenizer starts from these 256 possible byte values. Any text at all is a
# sequence of them before anything else happens, so there is never an "unknown" token: a
# character the vocabulary has no better token for simply stays as its bytes, and BPE may still
# join some of those bytes into one token.
#
# SentencePiece's **byte fallback** (字节回退), used by Llama 2, Mistral and Gemma, is a different
# mechanism with the same aim. Those tokenizers work on characters: the vocabulary holds
# characters and pieces of words, plus 256 tokens `<0x00>` … `<0xFF>`. Only a character missing
# from the vocabulary is written as byte tokens, one per UTF-8 byte, and those are never merged.
# A toy vocabulary built that way (the bytes, then "h", "i" and "hi") against SmolLM2's byte-level
# BPE, on the same text:

# %%
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models

vocab = {f"<0x{b:02X}>": b for b in range(256)}  # the 256 byte tokens
for piece in ["h", "i", "hi"]:  # the characters and pieces the toy vocabulary knows
    vocab[piece] = len(vocab)
fallback = RustTokenizer(models.BPE(vocab=vocab, merges=[("h", "i")], byte_fallback=True))
fallback.decoder = decoders.ByteFallback()
smollm2 = minillm.load_tokenizer("smollm2-135m")
sample = "hi 你"
encoded = fallback.encode(sample)
print("byte fallback: ", encoded.tokens, "->", repr(fallback.decode(encoded.ids)))
print("byte-level BPE:", smollm2.tokens(sample))
assert encoded.tokens[-3:] == ["<0xE4>", "<0xBD>", "<0xA0>"]  # 你, one token per byte

# %% [markdown]
# The fallback tokenizer knows "hi" but not the space or 你, so each becomes its bytes, one
# `<0xNN>` token per byte. SmolLM2 never looks at characters: everything is bytes from the start,
# the space is a token like any other (shown as a space here), and two of 你's three bytes have
# been merged into one token. The rest of this chapter is about byte-level BPE.
#
# The catch: a sequence of raw bytes is long. BPE shortens it by learning which neighbouring
# tokens occur together often and giving each such pair a token of its own.

# %% [markdown]
# ## 2 · Byte-pair encoding, one merge at a time
#
# BPE (字节对编码) is two small operations, repeated. Here is minillm's code for them:

# %%
show_source(pair_counts)
show_source(merge_pair)

# %% [markdown]
# Training repeats: count the pairs, merge the most frequent one into a new token (ids 256, 257,
# ...), record the merge. When two pairs are equally frequent, minillm takes the pair with the
# smallest ids (a rule the tests pin down, so training is reproducible). Watch the first merges
# on a tiny text:

# %%
toy = "low lower lowest newer newest wider widest"
ids = list(toy.encode("utf-8"))
pieces = {i: bytes([i]) for i in range(256)}  # what each id stands for
print(f"{len(ids)} byte tokens to start with")
for step in range(8):
    counts = pair_counts(ids)
    best = min(counts, key=lambda p: (-counts[p], p))  # most frequent, then smallest ids
    new_id = 256 + step
    pieces[new_id] = pieces[best[0]] + pieces[best[1]]
    ids = merge_pair(ids, best, new_id)
    print(f"merge {step}: {pieces[best[0]]!r} + {pieces[best[1]]!r} -> {pieces[new_id]!r} "
          f"(seen {counts[best]}x) -> {len(ids)} tokens")

# %% [markdown]
# Look at the merge `b'r' + b' '`: it glues the end of one word to the space before the next.
# Real tokenizers prevent that. Before BPE, the text is cut into words by a regular expression,
# the **pre-tokenizer** (预分词器), and merges never cross the cuts.
#
# The GGUF file names its pre-tokenizer `smollm`. transformers' GGUF reader does not know that
# name and falls back to GPT-2's pattern: contractions, an optional space followed by letters,
# an optional space followed by digits, other symbols, and whitespace. minillm reads the file
# the same way, so that its ids match the reference's (section 8 checks them).

# %%
tok = minillm.load_tokenizer("smollm2-135m")
print(tok.pre_tokenizer.steps[0]["pattern"])
print(tok.pre_tokenizer("I'm   learning BPE in 2024: 你好，世界！"))

# %% [markdown]
# llama.cpp reads the same name differently: its `smollm` pre-tokenizer first cuts every number
# character into a piece of its own, then applies GPT-2's pattern. SmolLM2's vocabulary hints
# that it was trained that way: not one of its tokens joins a digit to anything else. Does the
# difference change any ids? We build llama.cpp's split with minillm's `PreTokenizer` and
# compare on numbers and on the 300+ strings of section 8:

# %%
from minillm.tokenizer.samples import parity_strings
from minillm.tokenizer.pretokenize import GPT2_PATTERN, PreTokenizer

digit_tokens = [i for i in range(tok.vocab_size)
                if any(c in b"0123456789" for c in tok.token_bytes(i))]
print("tokens holding a digit:", len(digit_tokens), "- each a single digit:",
      all(len(tok.token_bytes(i)) == 1 for i in digit_tokens))

llama_cpp = minillm.load_tokenizer("smollm2-135m")
llama_cpp.pre_tokenizer = PreTokenizer([{"type": "digits", "individual": True},
                                        {"type": "split", "pattern": GPT2_PATTERN}])
numbers = ["In 2024, 1,234,567 people paid $19.99.", "pi = 3.14159265358979", "x  12",
           "2 ½ cups"]
for s in numbers:
    same = tok.encode(s) == llama_cpp.encode(s)
    print(f"{s!r:42} {'same ids' if same else 'differ:'}",
          "" if same else f"{tok.tokens(s)} against {llama_cpp.tokens(s)}")
every_string = parity_strings(chat_template=tok.apply_chat_template)
split_differs = [s for s in every_string if tok.encode(s) != llama_cpp.encode(s)]
print(f"{len(split_differs)} of {len(every_string)} test strings get different ids")
assert all(len(tok.token_bytes(i)) == 1 for i in digit_tokens)
assert tok.encode(numbers[0]) == llama_cpp.encode(numbers[0])

# %% [markdown]
# Ordinary numbers get the same ids either way: the vocabulary has only single-digit tokens, so
# both cuts end at one token per digit. The two part where two or more whitespace characters
# come before a digit (GPT-2's pattern gives the last one to the number, llama.cpp's first cut
# leaves the whitespace together), and on number symbols such as ½ and ³ after a space, which
# GPT-2's pattern keeps with the space. minillm follows transformers, the course's reference; the
# same file served by llama.cpp gives the other ids on such strings.

# %% [markdown]
# ## 3 · Training on a real corpus
#
# The repository ships a small corpus (see `data/SOURCES.md`): four Shakespeare plays, Tang poems
# in traditional Chinese and Song *ci* in simplified Chinese. `minillm.tokenizer.train` learns
# the merges; it updates only the pair counts next to each merge, so it is much faster than
# recounting everything every time.

# %%
text = corpus()
merges_mixed = 1000 if CI else 2000
start = time.process_time()
mixed = train(text, 256 + merges_mixed + 3, progress=True,
              name=f"BPE on the corpus ({256 + merges_mixed + 3:,} tokens)")
train_seconds = time.process_time() - start
print(f"{mixed}: {merges_mixed} merges on {len(text.encode()) / 1e6:.2f} MB "
      f"in {train_seconds:.1f} s of CPU time")

# %% [markdown]
# The first merges are the most frequent pairs of the whole corpus. In English they are spaces
# joined to letters and common endings; the Chinese text contributes byte pairs that are the
# first two bytes of common characters.

# %%
def show_merge(t, k):
    a, b = t.merges[k]
    return f"{t.token_bytes(a)!r} + {t.token_bytes(b)!r}"

for k in list(range(12)) + [merges_mixed - 3, merges_mixed - 2, merges_mixed - 1]:
    piece = mixed.token_bytes(256 + k).decode("utf-8", errors="backslashreplace")
    print(f"merge {k:>4}: {show_merge(mixed, k):<28} -> {piece!r}")

# %% [markdown]
# ## 4 · Why "你好，世界！" costs SmolLM2 so many tokens
#
# The source text says "你好，世界！" becomes 5 tokens. That is what a tokenizer trained on
# Chinese gives: its vocabulary holds common characters and words, such as 你好 and 世界, as
# single tokens.
# SmolLM2 is an English model. Its 49,152 tokens were learned from English text and code, where
# Chinese is rare, so few Chinese characters earned a token of their own. A character without one
# stays as its UTF-8 bytes, three for most Chinese characters, and BPE can join only the byte
# pairs it saw often enough:

# %%
def show_tokens(t, s):
    """The tokens of `s`, one coloured box each (a box with \\x.. holds part of a character)."""
    colours = ["#fde68a", "#a7f3d0", "#bfdbfe", "#fbcfe8", "#ddd6fe"]
    boxes = [f'<span style="background:{colours[k % 5]};padding:1px 3px;margin:1px;'
             f'font-family:monospace;white-space:pre">{piece}</span>'
             for k, piece in enumerate(t.tokens(s))]
    display(HTML(f"<b>{t.name}</b>: {len(boxes)} tokens<br>" + "".join(boxes)))

assert tok.vocab_size == 49_152
hello = "你好，世界！"
hello_ids = tok.encode(hello)
print(hello_ids)
print([tok.token_bytes(i) for i in hello_ids])
assert len(hello_ids) == 12
show_tokens(tok, hello)

# %% [markdown]
# Six characters, twelve tokens, not five: four characters become a two-byte token and a
# one-byte token, 界 becomes three single bytes, and only the full-width comma "，" has a token
# of its own. The count depends on the tokenizer, not on the text. A tokenizer trained on
# Chinese text learns whole characters instead, and then common words. Let's train one on the
# poems alone.

# %%
chinese_text = corpus("traditional Chinese") + corpus("simplified Chinese")
merges_zh = 2000 if CI else 4000
poems = train(chinese_text, 256 + merges_zh + 3, progress=True,
              name=f"BPE on Chinese poems ({256 + merges_zh + 3:,} tokens)")
for t in (tok, mixed, poems):
    show_tokens(t, hello)
    show_tokens(t, "春眠不觉晓，处处闻啼鸟。")

# %% [markdown]
# The poems tokenizer writes classical lines in close to one token per character.
# For "你好，世界！" it gains less than you might expect: 你 (modern "you") and the full-width
# "！" are rare in Tang and Song poetry. A tokenizer learns the text it is trained on.
#
# The chart measures tokens per character over sentences in several languages (none of them taken
# from the training corpus). More tokens per character means a longer, slower and costlier input
# for the same text: prefill time, KV-cache memory and context length are all counted in tokens.

# %%
from minillm.tokenizer import samples

groups = {"English": samples.ENGLISH, "Chinese (simpl.)": samples.CHINESE_SIMPLIFIED,
          "Chinese (trad.)": samples.CHINESE_TRADITIONAL, "Japanese": samples.JAPANESE,
          "Korean": samples.KOREAN, "Arabic etc.": samples.ARABIC, "code": samples.CODE,
          "emoji": samples.EMOJI}

def tokens_per_char(t, texts):
    return sum(len(t.encode(s)) for s in texts) / sum(len(s) for s in texts)

table = {t.name: [tokens_per_char(t, texts) for texts in groups.values()]
         for t in (tok, mixed, poems)}
fig, ax = plt.subplots(figsize=(12, 3.8))
width = 0.27
for k, (name, values) in enumerate(table.items()):
    ax.bar([x + (k - 1) * width for x in range(len(groups))], values, width, label=name)
ax.set_xticks(range(len(groups)), list(groups), rotation=20)
ax.set_ylabel("tokens per character")
ax.set_title("The same text costs different numbers of tokens")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
plt.tight_layout()
plt.show()
for name, values in table.items():
    print(f"{name:<42}" + "  ".join(f"{g}: {v:.2f}" for g, v in zip(groups, values)))

# %% [markdown]
# Try your own text: the boxes show how each tokenizer cuts it.

# %%
import ipywidgets as widgets

choices = {t.name: t for t in (tok, mixed, poems)}

def explore(text="Tokenizers cut 文本 into 词元 🙂", tokenizer=tok.name):
    show_tokens(choices[tokenizer], text)

text_box = widgets.Text(value="Tokenizers cut 文本 into 词元 🙂", description="text")
widgets.interact(explore, text=text_box,
                 tokenizer=widgets.Dropdown(options=list(choices), description="tokenizer"));

# %% [markdown]
# ### A hole in SmolLM2's byte alphabet
#
# "Never an unknown token" holds only if all 256 bytes have a token. SmolLM2's vocabulary lacks
# a few: six rare control characters, and bytes that only start characters beyond U+3FFFF or
# never occur in UTF-8 at all. The real tokenizer silently drops such bytes, and so does
# minillm, to give the same ids:

# %%
print("bytes without a token:", [f"0x{b:02x}" for b in tok.missing_bytes])
print(tok.encode("a\x04b"), repr(tok.decode(tok.encode("a\x04b"))))

# %% [markdown]
# ## 5 · Special tokens and the chat template
#
# Some tokens are not text at all: they mark structure. SmolLM2 has 17 **special tokens**
# (特殊词元), such as `<|im_start|>` and `<|im_end|>` around each chat message and
# `<|endoftext|>`. They are matched whole in the text before anything else, so they are never
# split; `encode_ordinary` shows what would happen otherwise.

# %%
print(tok.special_tokens)
assert len(tok.special_tokens) == 17
print("eos:", tok.eos_token_id, "stops generation:", tok.eos_token_ids, "bos:", tok.bos_token_id)
print(tok.encode("<|im_start|>user"))
print(tok.encode_ordinary("<|im_start|>user"))

# %% [markdown]
# A chat model reads one string built by its **chat template** (对话模板). SmolLM2's template is
# stored in the GGUF file as a small Jinja program; minillm renders it. It adds a default system
# message when the conversation has none, and with `add_generation_prompt=True` it ends with the
# assistant's header, so the model's continuation is the answer.

# %%
messages = [{"role": "user", "content": "What is a token?"}]
prompt = tok.apply_chat_template(messages, add_generation_prompt=True)
print(prompt)
prompt_ids = tok.encode(prompt)
print(f"{len(prompt_ids)} tokens; the ids of <|im_start|>: "
      f"{[k for k, i in enumerate(prompt_ids) if i == tok.special_token_id('<|im_start|>')]}")

# %% [markdown]
# The same format written in plain Python (ChatML), which the tests check against the template:

# %%
from minillm.tokenizer import chatml
from minillm.tokenizer.chat import SMOLLM_SYSTEM

show_source(chatml)
assert chatml(messages, default_system=SMOLLM_SYSTEM) == prompt

# %% [markdown]
# ## 6 · Decoding, and decoding while generating
#
# Decoding joins the tokens' bytes and reads them as UTF-8. During generation, though, tokens
# arrive one at a time, and a token may end in the middle of a character. The **stream decoder**
# (流式解码器) holds those bytes back until the character is complete, so a streaming chat never
# prints a broken character. Chapters 03 and 05 stream through it.

# %%
stream = tok.stream_decoder()
for i in hello_ids:
    out = stream.push(i)
    print(f"token {i:>5} = {tok.token_bytes(i)!r:<18} push -> {out!r}")
print("flush ->", repr(stream.flush()))
naive = [tok.decode([i]) for i in hello_ids]
print("decoding each token alone instead:", naive)

# %%
show_source(minillm.tokenizer.StreamDecoder.push)

# %% [markdown]
# ## 7 · WordPiece compared with BPE
#
# BERT's **WordPiece** (词片) also builds words from pieces, marking a piece that continues a word
# with `##`. It works on characters, not bytes: its vocabulary must hold every character it will
# ever meet, and a word with a character it never saw becomes `[UNK]`, the text lost.
#
# WordPiece as Google described it differs from BPE in two more ways. Its training merges the
# pair that raises the likelihood of the training text most, which comes down to the score
# count(ab) / (count(a) · count(b)), not the most frequent pair. Its encoding takes, from the
# start of each word, the longest piece in the vocabulary, instead of replaying merges.
#
# To compare like with like, we train both on the English plays with the same vocabulary size;
# WordPiece with the `tokenizers` package.

# %%
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

english_text = corpus("english")
bpe_en = train(english_text, 256 + 1000 + 3, name="BPE (English)")
wordpiece = RustTokenizer(models.WordPiece(unk_token="[UNK]"))
wordpiece.normalizer = normalizers.BertNormalizer(lowercase=False, handle_chinese_chars=True)
wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
wordpiece.decoder = decoders.WordPiece()
wordpiece.train_from_iterator(
    english_text.splitlines(), trainers.WordPieceTrainer(vocab_size=bpe_en.vocab_size,
                                                         special_tokens=["[UNK]"],
                                                         show_progress=False))
print(f"vocabulary sizes: BPE {bpe_en.vocab_size}, WordPiece {wordpiece.get_vocab_size()}")
for s in ["The quickest brown foxes", "Thou art  more lovely", "naïve café 🙂", "你好，世界！",
          "x = lambda y: y ** 2"]:
    print(f"{s!r}\n  WordPiece {wordpiece.encode(s).tokens}\n  BPE       {bpe_en.tokens(s)}")

# %% [markdown]
# Which merge rule did that trainer use? The `tokenizers` package's `WordPieceTrainer` trains with
# BPE's rule, the most frequent pair, and only writes the result in WordPiece's form. A BPE
# trainer given the same settings and the `##` mark shows it: the two vocabularies are almost
# the same (the check: at least 99% of the tokens shared).

# %%
same_settings = RustTokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
same_settings.normalizer = wordpiece.normalizer
same_settings.pre_tokenizer = wordpiece.pre_tokenizer
same_settings.train_from_iterator(
    english_text.splitlines(), trainers.BpeTrainer(vocab_size=bpe_en.vocab_size,
                                                   special_tokens=["[UNK]"],
                                                   continuing_subword_prefix="##",
                                                   show_progress=False))
shared = set(wordpiece.get_vocab()) & set(same_settings.get_vocab())
print(f"WordPieceTrainer and BpeTrainer share {len(shared)} of {wordpiece.get_vocab_size()} "
      "tokens")
assert len(shared) >= 0.99 * wordpiece.get_vocab_size()

# %% [markdown]
# So the comparison here is of WordPiece's format and its longest-piece encoding, on a vocabulary
# learned by frequency. The likelihood rule would have started elsewhere. The first pairs each
# rule picks on the plays' words (a piece after the first letter of a word carries `##`):

# %%
from collections import Counter

word_counts = Counter(w for w, _ in wordpiece.pre_tokenizer.pre_tokenize_str(english_text))
pair_count, piece_count = Counter(), Counter()
for word, n in word_counts.items():
    symbols = [word[0]] + ["##" + ch for ch in word[1:]]
    for piece in symbols:
        piece_count[piece] += n
    for pair in zip(symbols, symbols[1:]):
        pair_count[pair] += n


def likelihood_score(pair):
    return pair_count[pair] / (piece_count[pair[0]] * piece_count[pair[1]])


by_frequency = sorted(pair_count, key=lambda pair: -pair_count[pair])[:5]
by_likelihood = sorted(pair_count, key=lambda pair: -likelihood_score(pair))[:5]
for name, chosen in [("frequency (BPE)", by_frequency), ("likelihood (WordPiece)", by_likelihood)]:
    print(f"{name:>22}: " + ", ".join(f"{a}+{b} ({pair_count[a, b]}x)" for a, b in chosen))

# %% [markdown]
# Frequency picks the most common letter pairs (t and h, h and e). Likelihood picks pairs whose parts
# seldom appear apart, however rare: inside a word, a capital Q appears only in BANQUO, a
# speaker's name printed in capitals in *Macbeth*, and always before a U. Both schemes then keep
# merging the pieces they made.

# %%
every = [s for texts in groups.values() for s in texts]
unknown = sum(wordpiece.encode(s).tokens.count("[UNK]") for s in every)
wp_rate = sum(len(wordpiece.encode(s).ids) for s in every) / sum(map(len, every))
lost_wp = sum(wordpiece.decode(wordpiece.encode(s).ids) != s for s in every)
bpe_rate = tokens_per_char(bpe_en, every)
lost_bpe = sum(bpe_en.decode(bpe_en.encode(s)) != s for s in every)
print(f"on {len(every)} sentences in eight groups:")
print(f"  WordPiece: {wp_rate:.2f} tokens/char, {unknown} [UNK] tokens, "
      f"{lost_wp} sentences not given back exactly")
print(f"  BPE:       {bpe_rate:.2f} tokens/char, 0 unknown by construction, "
      f"{lost_bpe} sentences not given back exactly")

# %% [markdown]
# On English, both learn whole words and common endings. Outside it, WordPiece gives up on whole
# words (`[UNK]`), while byte-level BPE keeps such text as bytes and pays in length instead.
# WordPiece also cannot give back the exact text: its pre-tokenizer drops the spaces, so decoding
# guesses where they were. Byte-level BPE keeps every byte, spaces included, and
# `decode(encode(s)) == s` for any text (the tests check that on thousands of random strings).

# %% [markdown]
# ## 8 · Parity with the real tokenizer, live
#
# minillm's tokenizer reads SmolLM2's vocabulary and merges straight from the GGUF file's
# metadata. The reference is the tokenizer transformers builds from the same file. We compare the
# ids on 300+ test strings: prose, Chinese, Japanese, Korean, Arabic, emoji with ZWJ sequences,
# code, numbers, whitespace runs, special tokens inside text and chat-template output.

# %%
_, reference = minillm.load_reference("smollm2-135m")
strings = parity_strings(chat_template=tok.apply_chat_template)
different = [s for s in strings if tok.encode(s) != reference.encode(s)]
print(f"{len(strings) - len(different)} of {len(strings)} strings give identical ids")
assert not different, different[:3]

# %% [markdown]
# ## 9 · Speed
#
# minillm's tokenizer is plain Python. It keeps up by caching: each distinct word is split by BPE
# once, and later occurrences are one dictionary look-up. The Rust tokenizer inside transformers
# is the yardstick, timed here on the same text (CPU time, which a busy shared machine disturbs
# less than wall-clock time).

# %%
english = corpus("english")
if CI:
    english = english[:150_000]
size = len(english.encode("utf-8")) / 1e6
rust = reference.backend_tokenizer

def cpu_seconds(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result

fresh = minillm.load_tokenizer("smollm2-135m")  # an empty word cache
cold, ours = cpu_seconds(lambda: fresh.encode(english))
warm, _ = cpu_seconds(lambda: fresh.encode(english))
rust_time, theirs = cpu_seconds(lambda: rust.encode(english, add_special_tokens=False).ids)
assert ours == theirs
speed = {"minillm (cold cache)": size / cold, "minillm (warm cache)": size / warm,
         "Rust tokenizers": size / rust_time}
for name, mbps in speed.items():
    print(f"{name:<22} {mbps:6.2f} MB/s")
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.barh(list(speed), list(speed.values()))
ax.set_xlabel(f"MB/s encoding {size:.2f} MB of English prose")
plt.tight_layout()
plt.show()

# %% [markdown]
# Where does each spend its time? Both first cut the text with the pre-tokenizer's regular
# expression: minillm with Python's `regex` module, the Rust tokenizer with the Oniguruma library.
# Timing that step alone shows how much of each total it is. (Rust's `pre_tokenize_str` also hands
# every piece and its offsets back to Python, so its figure includes that cost too.)

# %%
split_ours, _ = cpu_seconds(lambda: tok.pre_tokenizer(english))
split_rust, _ = cpu_seconds(lambda: rust.pre_tokenizer.pre_tokenize_str(english))
print(f"pre-tokenizer alone: minillm {size / split_ours:.2f} MB/s "
      f"({split_ours / warm:.0%} of its warm encode), Rust {size / split_rust:.2f} MB/s "
      f"({split_rust / rust_time:.0%} of its encode)")

# %% [markdown]
# `scripts/bench_tokenizer.py` measures the same on 1 MB of mixed text, in wall-clock and CPU
# time, and prints a JSON record with the machine and versions.
#
# ## Summary
#
# - A tokenizer maps text to token ids; byte-level BPE starts from the 256 bytes and learns merges
#   of frequent neighbouring pairs, so any text can be encoded and decoded exactly.
# - The pre-tokenizer's regex, the merges' order and the special tokens must match the model's
#   exactly; minillm reads them from the GGUF file and gives the same ids as transformers.
# - Tokens per character depend on the training text: SmolLM2's mostly English vocabulary spends
#   several times more tokens per character on Chinese than on English (the chart above).
# - The chat template turns messages into one string with special tokens; the stream decoder
#   turns generated tokens back into text without broken characters.
#
# The figures of this run:

# %%
print(f"training: {merges_mixed} merges on {len(text.encode()) / 1e6:.2f} MB took "
      f"{train_seconds:.1f} s CPU")
print(f"encoding {size:.2f} MB of English: minillm {speed['minillm (cold cache)']:.2f} MB/s cold, "
      f"{speed['minillm (warm cache)']:.2f} MB/s warm; Rust {speed['Rust tokenizers']:.2f} MB/s; "
      f"minillm/Rust = {speed['minillm (cold cache)'] / speed['Rust tokenizers']:.2f} (cold), "
      f"{speed['minillm (warm cache)'] / speed['Rust tokenizers']:.2f} (warm)")
smol = dict(zip(groups, table[tok.name]))
print(f"SmolLM2 tokens per character: English {smol['English']:.2f}, simplified Chinese "
      f"{smol['Chinese (simpl.)']:.2f}, traditional Chinese {smol['Chinese (trad.)']:.2f}")
print(f"你好，世界！: SmolLM2 {len(tok.encode(hello))} tokens, mixed BPE "
      f"{len(mixed.encode(hello))}, poems BPE {len(poems.encode(hello))}")
