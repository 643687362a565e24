"""Test strings for comparing minillm's tokenizer with the real one, and the course corpus.

`parity_strings()` gives 300+ strings covering what tends to break tokenizers: prose, Chinese
(simplified and traditional), Japanese, Korean, Arabic, emoji and ZWJ sequences, code, numbers,
runs of spaces, tabs and newlines, leading and trailing whitespace, special tokens inside text and
chat-template output. The tests, the lesson and the benchmark use it.
"""

from __future__ import annotations

import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"
CORPUS_FILES = {"english": "shakespeare.txt", "traditional Chinese": "tang_poems.txt",
                "simplified Chinese": "song_ci.txt"}


def corpus(name: str | None = None) -> str:
    """The chapter's training text: one part ("english", "traditional Chinese",
    "simplified Chinese") or, with no name, all three joined."""
    if name is None:
        return "\n".join(corpus(n) for n in CORPUS_FILES)
    if name not in CORPUS_FILES:
        raise ValueError(f"unknown corpus part {name!r}; choose from {sorted(CORPUS_FILES)}")
    path = DATA / CORPUS_FILES[name]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the corpus ships in the repository's data/")
    return path.read_text(encoding="utf-8")


ENGLISH = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, but we've never done that and you'd know.",
    "DON'T SHOUT, IT'S RUDE.", "Mr. O'Neil's cat isn't here.", "e.g. i.e. etc. vs.",
    "A tokenizer turns text into integers called tokens.",
    "Large language models read text as tokens, not as letters.",
    "What's the capital of France?", "Supercalifragilisticexpialidocious!",
    "naïve café résumé façade coöperate", "Ünïcödé äccents everywhere: Straße, Øresund, Łódź.",
    "ﬁnancial ﬂow (ligatures)", "“Curly quotes” and ‘single ones’ — with dashes – too…",
]
CHINESE_SIMPLIFIED = [
    "你好，世界！", "我喜欢自然语言处理。", "大语言模型的推理过程包括预填充和解码两个阶段。",
    "今天天气很好，我们去公园散步吧。", "分词器把文本切成词元。", "北京欢迎你",
]
CHINESE_TRADITIONAL = [
    "你好，世界！歡迎來到臺灣。", "語言模型會把文字切成詞元。", "龍飛鳳舞，萬象更新。",
    "繁體中文與簡體中文", "學而時習之，不亦說乎？",
]
JAPANESE = [
    "こんにちは、世界！", "私は東京に住んでいます。", "カタカナとひらがなと漢字",
    "ｶﾀｶﾅ（半角）", "トークナイザーはテキストをトークンに分割します。", "日本語の文章です。",
]
KOREAN = [
    "안녕하세요, 세계!", "저는 한국어를 공부합니다.", "토크나이저는 텍스트를 토큰으로 나눕니다.",
    "한글 ㄱㄴㄷ 자모", "서울특별시",
]
ARABIC = [
    "مرحبا بالعالم!", "أنا أحب تعلم اللغات.", "اللغة العربية جميلة", "٠١٢٣٤٥٦٧٨٩ أرقام عربية",
    "שלום עולם", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "नमस्ते दुनिया", "สวัสดีชาวโลก",
]
EMOJI = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇨🇳🇺🇸🇯🇵", "1️⃣ 2️⃣ #️⃣", "❤️‍🔥", "🧑🏿‍💻 coding",
    "I love 🍕 and 🍣!", "🙂🙃😉😊😇", "👩‍❤️‍💋‍👨", "a\u200db\u200cc", "\ufeffBOM at start",
    "🤖 tokens: 🚀✨", "♥♦♣♠ ★☆",
]
CODE = [
    "def add(a, b):\n    return a + b\n", "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)",
    "if __name__ == \"__main__\":\n\tmain()", "<div class=\"box\">Hi</div>",
    "SELECT * FROM users WHERE id = 42;", "{\"key\": [1, 2, 3], \"ok\": true}",
    "x = lambda y: y ** 2  # square", "fn main() { println!(\"hi\"); }",
    "    indented code\n        more indented\n", "a->b; c::d; e=>f; g!=h; i<=j",
    "https://example.com/path?query=1&x=%20", "user@example.com", "C:\\Users\\name\\file.txt",
    "$ pip install minillm && make test",
]
NUMBERS = [
    "1234567890", "3.14159", "1,000,000", "-42", "1e-10", "0x1F", "2024-11-30",
    "12:30:45", "$19.99", "50%", "Call 555-0123 now", "v1.2.3", "1/2 + 3/4 = 5/4",
    "⅓ ½ ¾ ² ³", "Ⅻ roman", "１２３ full-width digits", "100000000000000000000",
]
WHITESPACE = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t\tx", "x\t\t\t", "   hello",
    "hello   ", "  hello  world  ", "a  b   c    d", "line1\nline2\n\nline4", "\n\n\nstart",
    "end\n\n\n", " \t \n mixed \t\n", "tab\tseparated\tvalues", "\u00a0non-breaking\u00a0space",
    "\u3000ideographic space\u3000", "x \u2003 em space", "", "\u000b\u000c form feeds",
]
SPECIAL_IN_TEXT = [
    "<|endoftext|>", "Hello<|endoftext|>World", "<|im_start|>user\nHi<|im_end|>",
    "text <|im_end|> more", "<|im_start|><|im_end|>", "a<|endoftext|><|endoftext|>b",
    "<|im_start", "im_end|>", "<|notatoken|>", "<repo_name>minillm<file_sep>x.py",
    "<filename>a.py\n<gh_stars>10", "< |im_end| >", "<|im_end|>\n<|im_start|>assistant\n",
    "你好<|im_end|>世界", "<jupyter_code>print(1)<jupyter_output>1",
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "What is BPE?"},
     {"role": "assistant", "content": "Byte-pair encoding."},
     {"role": "user", "content": "And WordPiece?"}],
    [{"role": "user", "content": "你好，世界！"}],
    [{"role": "user", "content": "Write code:\n```python\nprint('hi')\n```"}],
    [{"role": "user", "content": "  spaces around  "}],
    [{"role": "user", "content": "emoji 👨‍👩‍👧‍👦 and 😀"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
]


def parity_strings(seed: int = 0, chat_template=None) -> list[str]:
    """300+ test strings (deterministic for a seed). With `chat_template` (a function of a
    message list, such as a tokenizer's `apply_chat_template`) conversations are included."""
    rng = random.Random(seed)
    fixed = (ENGLISH + CHINESE_SIMPLIFIED + CHINESE_TRADITIONAL + JAPANESE + KOREAN + ARABIC
             + EMOJI + CODE + NUMBERS + WHITESPACE + SPECIAL_IN_TEXT)
    out = list(fixed)
    for name, count in [("english", 60), ("traditional Chinese", 25), ("simplified Chinese", 25)]:
        lines = [line for line in corpus(name).splitlines() if line.strip()]
        out += rng.sample(lines, count)
        start = rng.randrange(len(lines) - 8)
        out.append("\n".join(lines[start:start + 8]))
    spaces = [" ", "  ", "\t", "\n", "\r\n", "   ", "\n\n", " \t"]
    for _ in range(40):  # whitespace around and between pieces
        pieces = rng.sample(fixed, 2)
        out.append(rng.choice(spaces) + pieces[0] + rng.choice(spaces) * rng.randint(1, 3)
                   + pieces[1] + rng.choice(spaces + [""]))
    for _ in range(40):  # mixtures of languages, code and specials
        out.append("".join(rng.sample(fixed, rng.randint(2, 4))))
    if chat_template is not None:
        for messages in CONVERSATIONS:
            out.append(chat_template(messages))
            out.append(chat_template(messages, add_generation_prompt=False))
    return out
