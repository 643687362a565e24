# 中文版 · 01_tokenization.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=2bd350c5
# # 01 · 分词：从文本到词元 id，再回到文本
#
# 语言模型从来看不到字母。它看到的是一串整数，即**词元 id**（token id），每个 id 代表一小段文本，
# 这段文本叫作**词元**（token）。把文本切成词元的过程叫**分词**（tokenization），完成这件事的
# 程序叫**分词器**（tokenizer）。
#
# 本章我们为 minillm 亲手写一个分词器：**字节级字节对编码**（byte-level BPE）。GPT-2、Llama 3、
# Qwen2 以及本课程的模型 SmolLM2 用的都是这一类分词器。写好之后，我们检验它给出的 id 与真实
# 分词器的*完全*一致。本章的步骤：
#
# 1. 文本 → UTF-8 字节
# 2. 一步步演示字节对编码（BPE），再在语料上训练它
# 3. 实测：为什么中文在 SmolLM2 那里要花这么多词元
# 4. 特殊词元与对话模板
# 5. 流式解码；WordPiece 与 BPE 的比较；与真实分词器对照结果和速度

# %% en=e1082a71
import os
import time

import matplotlib.pyplot as plt
from IPython.display import HTML, display

import minillm
from minillm.course import show_source
from minillm.tokenizer import merge_pair, pair_counts, train
from minillm.course.tokenizer_samples import corpus

CI = bool(os.environ.get("CI"))  # 在测试套件里运行时用较小的规模

# %% [markdown] en=3e3a7a79
# ## 1 · 文本就是字节
#
# Unicode 给每个字符一个编号（码位，code point）；UTF-8 把每个码位写成 1 到 4 个**字节**。
# ASCII 字母占 1 个字节，大多数汉字占 3 个，emoji 占 4 个。

# %% en=52a9c354
for ch in ["a", "é", "你", "👋"]:
    data = ch.encode("utf-8")
    print(f"{ch!r}：码位 U+{ord(ch):04X}，UTF-8 字节 {list(data)}（{len(data)} 个字节）")

# %% [markdown] en=d3d95a86
# 字节级分词器从这 256 个可能的字节值出发。任何文本在做任何处理之前就已经是一串字节，所以永远
# 不会出现“未知”词元：如果词表里没有更合适的词元，一个字符就保持为它的各个字节，BPE 仍然可能把
# 其中几个字节合并成一个词元。
#
# SentencePiece 的**字节回退**（byte fallback）是另一种机制，目标相同，Llama 2、Mistral 和
# Gemma 用的就是它。这些分词器以字符为单位：词表里是字符和词的片段，外加 256 个词元
# `<0x00>` … `<0xFF>`。只有词表里没有的字符才会被写成字节词元，每个 UTF-8 字节一个，而且这些
# 字节词元从不参与合并。下面按这种方式搭一个玩具词表（先是 256 个字节，再是“h”“i”和“hi”），
# 与 SmolLM2 的字节级 BPE 对同一段文本做比较：

# %% en=5252f536
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models

vocab = {f"<0x{b:02X}>": b for b in range(256)}  # 256 个字节词元
for piece in ["h", "i", "hi"]:  # 玩具词表认识的字符和片段
    vocab[piece] = len(vocab)
fallback = RustTokenizer(models.BPE(vocab=vocab, merges=[("h", "i")], byte_fallback=True))
fallback.decoder = decoders.ByteFallback()
smollm2 = minillm.load_tokenizer("smollm2-135m")
sample = "hi 你"
encoded = fallback.encode(sample)
print("字节回退：  ", encoded.tokens, "->", repr(fallback.decode(encoded.ids)))
print("字节级 BPE：", smollm2.tokens(sample))
assert encoded.tokens[-3:] == ["<0xE4>", "<0xBD>", "<0xA0>"]  # “你”，每个字节一个词元

# %% [markdown] en=4a0a88ee
# 玩具分词器认识“hi”，却不认识空格和“你”，所以这两个字符都变成了它们的字节，每个字节一个
# `<0xNN>` 词元。SmolLM2 则从不看字符：一切从一开始就是字节，空格和别的词元没什么两样（这里显示为
# 一个空格），“你”的 3 个字节里有两个已经合并成了一个词元。本章接下来讲的都是字节级 BPE。
#
# 代价是：原始字节组成的序列很长。BPE 的做法是学习哪些相邻的词元经常一起出现，并给每个这样的
# 组合分配一个新词元，从而把序列缩短。

# %% [markdown] en=9c866e93
# ## 2 · 字节对编码：一次合并一对
#
# 字节对编码（byte pair encoding，BPE）就是两个小操作的反复执行。下面是 minillm 里这两个操作的代码：

# %% en=a830d66d
show_source(pair_counts)
show_source(merge_pair)

# %% [markdown] en=d6f99d27
# 训练过程就是不断重复：统计所有相邻对，把出现次数最多的那一对合并成一个新词元（id 依次为
# 256、257……），并记下这次合并。如果两对出现的次数一样多，minillm 取 id 最小的那一对
# （测试固定了这条规则，所以训练结果可以复现）。在一小段文本上看看最初的几次合并：

# %% en=ab3347b9
toy = "low lower lowest newer newest wider widest"
ids = list(toy.encode("utf-8"))
pieces = {i: bytes([i]) for i in range(256)}  # 每个 id 代表的字节
print(f"开始时有 {len(ids)} 个字节词元")
for step in range(8):
    counts = pair_counts(ids)
    best = min(counts, key=lambda p: (-counts[p], p))  # 次数最多；次数相同时取 id 最小的
    new_id = 256 + step
    pieces[new_id] = pieces[best[0]] + pieces[best[1]]
    ids = merge_pair(ids, best, new_id)
    print(f"第 {step} 次合并：{pieces[best[0]]!r} + {pieces[best[1]]!r} -> {pieces[new_id]!r}"
          f"（出现 {counts[best]} 次）-> 剩 {len(ids)} 个词元")

# %% [markdown] en=eaacbc4a
# 注意 `b'r' + b' '` 这次合并：它把一个词的结尾和下一个词前面的空格粘在了一起。真实的分词器
# 会防止这种情况：在 BPE 之前，先用一个正则表达式把文本切成一个个词，这一步叫**预分词器**
# （pre-tokenizer），合并永远不会跨越切分的边界。
#
# GGUF 文件里写明的预分词器名为 `smollm`。transformers 的 GGUF 读取器不认识这个名字，于是退回
# 到 GPT-2 的模式：英文缩写、可选的空格加字母、可选的空格加数字、其他符号，以及空白字符。
# minillm 也按同样的方式读这个文件，这样它的 id 才能和参考实现的一致（第 8 节会检验）。

# %% en=843b99f6
tok = minillm.load_tokenizer("smollm2-135m")
print(tok.pre_tokenizer.steps[0]["pattern"])
print(tok.pre_tokenizer("I'm   learning BPE in 2024: 你好，世界！"))

# %% [markdown] en=3a2cb3ad
# llama.cpp 对同一个名字的理解不同：它的 `smollm` 预分词器先把每个数字字符单独切成一段，再套用
# GPT-2 的模式。SmolLM2 的词表暗示它当初就是这样训练的：词表里没有一个词元把数字和别的字符连在
# 一起。这个差别会改变 id 吗？我们用 minillm 的 `PreTokenizer` 搭出 llama.cpp 的切分方式，
# 在数字和第 8 节的 300 多个字符串上做比较：

# %% en=25649395
from minillm.course.tokenizer_samples import parity_strings
from minillm.tokenizer.pretokenize import GPT2_PATTERN, PreTokenizer

digit_tokens = [i for i in range(tok.vocab_size)
                if any(c in b"0123456789" for c in tok.token_bytes(i))]
print("含数字的词元：", len(digit_tokens), "个；每个都只是一个数字：",
      all(len(tok.token_bytes(i)) == 1 for i in digit_tokens))

llama_cpp = minillm.load_tokenizer("smollm2-135m")
llama_cpp.pre_tokenizer = PreTokenizer([{"type": "digits", "individual": True},
                                        {"type": "split", "pattern": GPT2_PATTERN}])
numbers = ["In 2024, 1,234,567 people paid $19.99.", "pi = 3.14159265358979", "x  12",
           "2 ½ cups"]
for s in numbers:
    same = tok.encode(s) == llama_cpp.encode(s)
    print(f"{s!r:42} {'id 相同' if same else '不同：'}",
          "" if same else f"{tok.tokens(s)} 对比 {llama_cpp.tokens(s)}")
every_string = parity_strings(chat_template=tok.apply_chat_template)
split_differs = [s for s in every_string if tok.encode(s) != llama_cpp.encode(s)]
print(f"{len(every_string)} 个测试字符串中，有 {len(split_differs)} 个得到不同的 id")
assert all(len(tok.token_bytes(i)) == 1 for i in digit_tokens)
assert tok.encode(numbers[0]) == llama_cpp.encode(numbers[0])

# %% [markdown] en=591147cf
# 普通的数字两种方式得到的 id 相同（上面打印的“id 相同”）：词表里只有单个数字的词元，所以
# 两种切法最后都是一个数字一个词元。两者的分歧出现在两处：数字前面有两个或更多空白字符时
# （GPT-2 的模式把最后一个空白分给数字，llama.cpp 的第一刀则让空白留在一起）；以及空格后面
# 跟着 ½、³ 这类数字符号时，GPT-2 的模式把它们和空格放在一起。minillm 以本课程的参考实现
# transformers 为准；同一个文件交给 llama.cpp 运行，在这类字符串上会得到另一组 id。

# %% [markdown] en=0f17dfee
# ## 3 · 在真实语料上训练
#
# 仓库里带了一份小语料（见 `data/SOURCES.md`）：四部莎士比亚戏剧、繁体中文的唐诗，以及简体中文
# 的宋词。`minillm.tokenizer.train` 从中学习合并规则；每次合并后它只更新这次合并旁边的相邻对
# 计数，所以比每次都从头重新统计要快得多。

# %% en=2d74d7fa
text = corpus()
merges_mixed = 1000 if CI else 2000
start = time.process_time()
mixed = train(text, 256 + merges_mixed + 3, progress=True,
              name=f"在整份语料上训练的 BPE（{256 + merges_mixed + 3:,} 个词元）")
train_seconds = time.process_time() - start
print(f"{mixed}：在 {len(text.encode()) / 1e6:.2f} MB 上做了 {merges_mixed} 次合并，"
      f"用了 {train_seconds:.1f} 秒 CPU 时间")

# %% [markdown] en=44fa4ffa
# 最先学到的合并，是整份语料里出现最频繁的相邻对。英文部分贡献的是与字母相连的空格和常见的
# 词尾；中文部分贡献的则是常用汉字的前两个字节组成的字节对。

# %% en=ea7fba76
def show_merge(t, k):
    a, b = t.merges[k]
    return f"{t.token_bytes(a)!r} + {t.token_bytes(b)!r}"

for k in list(range(12)) + [merges_mixed - 3, merges_mixed - 2, merges_mixed - 1]:
    piece = mixed.token_bytes(256 + k).decode("utf-8", errors="backslashreplace")
    print(f"第 {k:>4} 次合并：{show_merge(mixed, k):<28} -> {piece!r}")

# %% [markdown] en=91a494dc
# ## 4 · 为什么“你好，世界！”在 SmolLM2 那里要花这么多词元
#
# 原始资料里说，“你好，世界！”会变成 5 个词元。这是用中文训练出来的分词器给出的结果：它的
# 词表把常用的字和词（比如“你好”“世界”）各自收为一个词元。
#
# 而 SmolLM2 是一个英文模型。它的 49,152 个词元学自英文文本和代码，中文在其中很少见，所以只有
# 很少的汉字能挣到一个属于自己的词元。没有自己词元的汉字就保持为它的 UTF-8 字节（大多数汉字是
# 3 个字节），而 BPE 只能把它见得足够多的那些字节对合并起来：

# %% en=76fa8752
def show_tokens(t, s):
    """`s` 的各个词元，每个一个彩色方框（带 \\x.. 的方框只装着一个字符的一部分）。"""
    colours = ["#fde68a", "#a7f3d0", "#bfdbfe", "#fbcfe8", "#ddd6fe"]
    boxes = [f'<span style="background:{colours[k % 5]};padding:1px 3px;margin:1px;'
             f'font-family:monospace;white-space:pre">{piece}</span>'
             for k, piece in enumerate(t.tokens(s))]
    display(HTML(f"<b>{t.name}</b>：{len(boxes)} 个词元<br>" + "".join(boxes)))

assert tok.vocab_size == 49_152
hello = "你好，世界！"
hello_ids = tok.encode(hello)
print(hello_ids)
print([tok.token_bytes(i) for i in hello_ids])
assert len(hello_ids) == 12
show_tokens(tok, hello)

# %% [markdown] en=be5774a2
# 6 个字符，12 个词元，而不是 5 个：有 4 个字各变成一个双字节词元加一个单字节词元，“界”变成
# 3 个单字节词元，只有全角逗号“，”有自己的词元。词元的个数取决于分词器，而不取决于文本本身。
# 用中文文本训练出来的分词器会先学到整字，再学到常用词。我们只用诗词训练一个试试。

# %% en=956d9fee
chinese_text = corpus("traditional Chinese") + corpus("simplified Chinese")
merges_zh = 2000 if CI else 4000
poems = train(chinese_text, 256 + merges_zh + 3, progress=True,
              name=f"只在中文诗词上训练的 BPE（{256 + merges_zh + 3:,} 个词元）")
for t in (tok, mixed, poems):
    show_tokens(t, hello)
    show_tokens(t, "春眠不觉晓，处处闻啼鸟。")

# %% [markdown] en=bba91cb8
# 诗词分词器写古诗时接近一个字一个词元。对“你好，世界！”它的收益却没有想象中那么大：“你”
# （现代汉语的“你”）和全角的“！”在唐诗宋词里都很少见。分词器学到的，就是它训练时读到的文本。
#
# 下图统计了几种语言的句子（都不取自训练语料）平均每个字符要花几个词元。同样的文本，每个字符花的词元越多，
# 输入就越长、越慢、越贵：预填充的时间、KV 缓存的内存和上下文长度，都是按词元计算的。

# %% en=9d124c04
from minillm.course import tokenizer_samples as samples

groups = {"英文": samples.ENGLISH, "简体中文": samples.CHINESE_SIMPLIFIED,
          "繁体中文": samples.CHINESE_TRADITIONAL, "日文": samples.JAPANESE,
          "韩文": samples.KOREAN, "阿拉伯文等": samples.ARABIC, "代码": samples.CODE,
          "表情符号": samples.EMOJI}

def tokens_per_char(t, texts):
    return sum(len(t.encode(s)) for s in texts) / sum(len(s) for s in texts)

table = {t.name: [tokens_per_char(t, texts) for texts in groups.values()]
         for t in (tok, mixed, poems)}
fig, ax = plt.subplots(figsize=(12, 3.8))
width = 0.27
for k, (name, values) in enumerate(table.items()):
    ax.bar([x + (k - 1) * width for x in range(len(groups))], values, width, label=name)
ax.set_xticks(range(len(groups)), list(groups), rotation=20)
ax.set_ylabel("每个字符的词元数")
ax.set_title("同样的文本，花费的词元数各不相同")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
plt.tight_layout()
plt.show()
for name, values in table.items():
    print(f"{name:<42}" + "  ".join(f"{g}: {v:.2f}" for g, v in zip(groups, values)))

# %% [markdown] en=375f67ab
# 试试你自己的文本：方框显示了每个分词器是怎样切分它的。

# %% en=2211e23f
import ipywidgets as widgets

choices = {t.name: t for t in (tok, mixed, poems)}

def explore(text="Tokenizers cut 文本 into 词元 🙂", tokenizer=tok.name):
    show_tokens(choices[tokenizer], text)

text_box = widgets.Text(value="Tokenizers cut 文本 into 词元 🙂", description="文本")
widgets.interact(explore, text=text_box,
                 tokenizer=widgets.Dropdown(options=list(choices), description="分词器"));

# %% [markdown] en=0aa22d8b
# ### SmolLM2 的字节表里有个缺口
#
# “永远不会出现未知词元”的前提是 256 个字节都有自己的词元。SmolLM2 的词表缺了几个：6 个罕见的
# 控制字符，以及只会出现在 U+3FFFF 之后字符开头、或者在 UTF-8 里根本不会出现的字节。真实的
# 分词器会悄无声息地丢掉这些字节；为了给出相同的 id，minillm 也这样做：

# %% en=07e99966
print("没有词元的字节：", [f"0x{b:02x}" for b in tok.missing_bytes])
print(tok.encode("a\x04b"), repr(tok.decode(tok.encode("a\x04b"))))

# %% [markdown] en=2c79a0d8
# ## 5 · 特殊词元与对话模板
#
# 有些词元根本不是文本，而是用来标记结构的。SmolLM2 有 17 个**特殊词元**（special token），
# 比如包在每条对话消息两端的 `<|im_start|>` 和 `<|im_end|>`，以及 `<|endoftext|>`。分词时先在
# 文本里把它们整个匹配出来，再做别的处理，所以它们永远不会被拆开；`encode_ordinary` 展示了
# 不这样做会怎样。

# %% en=d6f2892d
print(tok.special_tokens)
assert len(tok.special_tokens) == 17
print("eos：", tok.eos_token_id, "停止生成的词元：", tok.eos_token_ids, "bos：", tok.bos_token_id)
print(tok.encode("<|im_start|>user"))
print(tok.encode_ordinary("<|im_start|>user"))

# %% [markdown] en=035dd886
# 对话模型读到的是一个字符串，由它的**对话模板**（chat template）拼成。SmolLM2 的模板以一个
# 小小的 Jinja 程序的形式存在 GGUF 文件里，由 minillm 来渲染。对话里没有系统消息时，模板会
# 加上默认的那一条；传入 `add_generation_prompt=True` 时，它以助手轮次的开头结尾，于是模型的
# 续写就是回答。

# %% en=9f4885ba
# 问题的意思是“什么是词元？”
messages = [{"role": "user", "content": "What is a token?"}]
prompt = tok.apply_chat_template(messages, add_generation_prompt=True)
print(prompt)
prompt_ids = tok.encode(prompt)
print(f"{len(prompt_ids)} 个词元；<|im_start|> 所在的位置："
      f"{[k for k, i in enumerate(prompt_ids) if i == tok.special_token_id('<|im_start|>')]}")

# %% [markdown] en=a9e42fee
# 同样的格式（ChatML）也可以用普通的 Python 写出来，测试会拿它和模板对照：

# %% en=dbd23d88
from minillm.tokenizer import chatml
from minillm.tokenizer.chat import SMOLLM_SYSTEM

show_source(chatml)
assert chatml(messages, default_system=SMOLLM_SYSTEM) == prompt

# %% [markdown] en=c57e77a3
# ## 6 · 解码，以及边生成边解码
#
# 解码就是把各个词元的字节拼起来，再按 UTF-8 读出文本。但在生成过程中，词元是一个一个到来的，
# 而一个词元可能恰好在某个字符的中间结束。**流式解码器**（stream decoder）会先扣住这些字节，
# 等字符凑完整了再输出，所以流式对话永远不会打印出半个字符。第 03 章和第 05 章的流式输出都经过它。

# %% en=eb2eebae
stream = tok.stream_decoder()
for i in hello_ids:
    out = stream.push(i)
    print(f"词元 {i:>5} = {tok.token_bytes(i)!r:<18} push -> {out!r}")
print("flush ->", repr(stream.flush()))
naive = [tok.decode([i]) for i in hello_ids]
print("如果逐个词元单独解码：", naive)

# %% en=1b8afca4
show_source(minillm.tokenizer.StreamDecoder.push)

# %% [markdown] en=16c1ac16
# ## 7 · WordPiece 与 BPE 的比较
#
# BERT 用的**词片**（WordPiece）同样用小片段拼出词，并在接续一个词的片段前面加上 `##` 标记。
# 但它处理的是字符而不是字节：它的词表必须装下它可能遇到的每一个字符，一个词里只要有一个它
# 没见过的字符，整个词就变成 `[UNK]`，原文随之丢失。
#
# Google 描述的 WordPiece 与 BPE 还有两点不同。训练时，它合并的是让训练文本的似然提高得最多的
# 那一对，归结起来就是按得分 count(ab) / (count(a) · count(b)) 选择，而不是选出现次数最多的一对。
# 编码时，它从每个词的开头起，每次取词表里最长的那个片段，而不是把合并规则重放一遍。
#
# 为了公平比较，我们用同样的词表大小，在英文戏剧上分别训练两者；WordPiece 用 `tokenizers` 包来训练。

# %% en=7f5380af
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

english_text = corpus("english")
bpe_en = train(english_text, 256 + 1000 + 3, name="BPE（英文）")
wordpiece = RustTokenizer(models.WordPiece(unk_token="[UNK]"))
wordpiece.normalizer = normalizers.BertNormalizer(lowercase=False, handle_chinese_chars=True)
wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
wordpiece.decoder = decoders.WordPiece()
wordpiece.train_from_iterator(
    english_text.splitlines(), trainers.WordPieceTrainer(vocab_size=bpe_en.vocab_size,
                                                         special_tokens=["[UNK]"],
                                                         show_progress=False))
print(f"词表大小：BPE {bpe_en.vocab_size}，WordPiece {wordpiece.get_vocab_size()}")
for s in ["The quickest brown foxes", "Thou art  more lovely", "naïve café 🙂", "你好，世界！",
          "x = lambda y: y ** 2"]:
    print(f"{s!r}\n  WordPiece {wordpiece.encode(s).tokens}\n  BPE       {bpe_en.tokens(s)}")

# %% [markdown] en=7b3c6189
# 上面那个训练器用的是哪条合并规则？`tokenizers` 包的 `WordPieceTrainer` 其实按 BPE 的规则
# （选出现次数最多的一对）训练，只是把结果写成 WordPiece 的格式。给 BPE 训练器同样的设置和
# `##` 标记就能看出来：两份词表几乎一样（检查的标准是：至少 99% 的词元相同）。

# %% en=1133de56
same_settings = RustTokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
same_settings.normalizer = wordpiece.normalizer
same_settings.pre_tokenizer = wordpiece.pre_tokenizer
same_settings.train_from_iterator(
    english_text.splitlines(), trainers.BpeTrainer(vocab_size=bpe_en.vocab_size,
                                                   special_tokens=["[UNK]"],
                                                   continuing_subword_prefix="##",
                                                   show_progress=False))
shared = set(wordpiece.get_vocab()) & set(same_settings.get_vocab())
print(f"WordPieceTrainer 与 BpeTrainer 的 {wordpiece.get_vocab_size()} 个词元中，"
      f"有 {len(shared)} 个相同")
assert len(shared) >= 0.99 * wordpiece.get_vocab_size()

# %% [markdown] en=fc6d9edb
# 所以这里比较的，是 WordPiece 的格式和它“取最长片段”的编码方式，而词表本身是按频率学出来的。
# 如果按似然规则训练，开头的合并会很不一样。下面是两条规则在戏剧的词上最先选中的几对（词里
# 第一个字母之后的片段都带 `##`）：

# %% en=4dd9c735
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
for name, chosen in [("按频率（即 BPE）", by_frequency), ("按似然（即 WordPiece）", by_likelihood)]:
    print(f"{name:>22}：" + "，".join(f"{a}+{b}（{pair_count[a, b]} 次）" for a, b in chosen))

# %% [markdown] en=ed31cc2d
# 按频率选中的是最常见的字母对（t 和 h、h 和 e）。按似然选中的则是两部分很少分开出现的对，哪怕
# 它们本身很罕见：在词的内部，大写的 Q 只出现在 BANQUO 里（《麦克白》中一个用大写字母印出的
# 角色名），而且后面总跟着 U。两种方案接下来都会继续合并它们自己造出的片段。

# %% en=62c94c85
every = [s for texts in groups.values() for s in texts]
unknown = sum(wordpiece.encode(s).tokens.count("[UNK]") for s in every)
wp_rate = sum(len(wordpiece.encode(s).ids) for s in every) / sum(map(len, every))
lost_wp = sum(wordpiece.decode(wordpiece.encode(s).ids) != s for s in every)
bpe_rate = tokens_per_char(bpe_en, every)
lost_bpe = sum(bpe_en.decode(bpe_en.encode(s)) != s for s in every)
print(f"在八组共 {len(every)} 个句子上：")
print(f"  WordPiece：每个字符 {wp_rate:.2f} 个词元，{unknown} 个 [UNK] 词元，"
      f"{lost_wp} 个句子不能原样还原")
print(f"  BPE：      每个字符 {bpe_rate:.2f} 个词元，按构造不会有未知词元，"
      f"{lost_bpe} 个句子不能原样还原")

# %% [markdown] en=7c4be334
# 在英文上，两者都能学到整词和常见词尾。离开英文，WordPiece 会放弃整个词（`[UNK]`），而字节级
# BPE 把这样的文本保持为字节，付出的代价是序列变长。WordPiece 还无法给出原来的文本：它的预分词器
# 丢掉了空格，解码时只能去猜空格原本在哪里。字节级 BPE 保留了每一个字节，空格也不例外，
# 所以对任何文本都有 `decode(encode(s)) == s`（测试在成千上万个随机字符串上检验了这一点）。

# %% [markdown] en=2778e3b8
# ## 8 · 与真实分词器当场对照
#
# minillm 的分词器直接从 GGUF 文件的元数据里读取 SmolLM2 的词表和合并规则。参考实现是
# transformers 从同一个文件构建的分词器。我们在 300 多个测试字符串上对比两者的 id：普通文本、
# 中文、日文、韩文、阿拉伯文、带 ZWJ 连接序列的 emoji、代码、数字、连续的空白、夹在文本里的
# 特殊词元，以及对话模板的输出。

# %% en=71a5642b
_, reference = minillm.load_reference("smollm2-135m")
strings = parity_strings(chat_template=tok.apply_chat_template)
different = [s for s in strings if tok.encode(s) != reference.encode(s)]
print(f"{len(strings)} 个字符串中，有 {len(strings) - len(different)} 个得到完全相同的 id")
assert not different, different[:3]

# %% [markdown] en=31630877
# ## 9 · 速度
#
# minillm 的分词器是纯 Python 写的。它靠缓存跟上速度：每个不同的词只用 BPE 切一次，之后再出现
# 就只是一次字典查找。transformers 里的 Rust 分词器是衡量的标尺，在同一段文本上计时（用的是
# CPU 时间，繁忙的共享机器对它的干扰比对墙钟时间小）。

# %% en=d2e07aa4
english = corpus("english")
if CI:
    english = english[:150_000]
size = len(english.encode("utf-8")) / 1e6
rust = reference.backend_tokenizer

def cpu_seconds(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result

fresh = minillm.load_tokenizer("smollm2-135m")  # 词缓存是空的
cold, ours = cpu_seconds(lambda: fresh.encode(english))
warm, _ = cpu_seconds(lambda: fresh.encode(english))
rust_time, theirs = cpu_seconds(lambda: rust.encode(english, add_special_tokens=False).ids)
assert ours == theirs
speed = {"minillm（缓存为空）": size / cold, "minillm（缓存已热）": size / warm,
         "Rust 分词器": size / rust_time}
for name, mbps in speed.items():
    print(f"{name:<22} {mbps:6.2f} MB/s")
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.barh(list(speed), list(speed.values()))
ax.set_xlabel(f"编码 {size:.2f} MB 英文文本的速度（MB/s）")
plt.tight_layout()
plt.show()

# %% [markdown] en=27d2db27
# 上面的“缓存为空”指词缓存为空的第一遍，“缓存已热”指缓存已填满的第二遍。两者各把时间花在了
# 哪里？它们都先用预分词器的正则表达式切分文本：minillm 用 Python 的 `regex` 模块，Rust 分词器
# 用 Oniguruma 库。单独给这一步计时，就能看出它在各自的总时间里占多少。（Rust 的
# `pre_tokenize_str` 还要把每一段及其偏移量交回 Python，所以它的数字里也包含了这部分开销。）

# %% en=b32f0632
split_ours, _ = cpu_seconds(lambda: tok.pre_tokenizer(english))
split_rust, _ = cpu_seconds(lambda: rust.pre_tokenizer.pre_tokenize_str(english))
print(f"只算预分词器：minillm {size / split_ours:.2f} MB/s"
      f"（占它缓存已热时编码的 {split_ours / warm:.0%}），Rust {size / split_rust:.2f} MB/s"
      f"（占它编码的 {split_rust / rust_time:.0%}）")

# %% [markdown] en=fd9d72e9
# `scripts/bench_tokenizer.py` 在 1 MB 的混合文本上测同样的东西，同时记录墙钟时间和 CPU 时间，
# 并打印一条包含机器和版本信息的 JSON 记录。
#
# ## 小结
#
# - 分词器把文本映射成词元 id。字节级 BPE 从 256 个字节出发，学习把频繁相邻的一对合并起来，
#   所以任何文本都能被准确地编码和解码。
# - 预分词器的正则表达式、合并的顺序和特殊词元，都必须与模型的完全一致；minillm 从 GGUF 文件
#   里读出它们，给出的 id 与 transformers 的相同。
# - 每个字符花多少词元取决于训练文本：SmolLM2 的词表以英文为主，中文每个字符花的词元是英文的
#   好几倍（见上面的图）。
# - 对话模板把一组消息变成一个带特殊词元的字符串；流式解码器把生成的词元还原成文本，不会出现
#   半个字符。
#
# 本次运行的数字：

# %% en=a420cf63
print(f"训练：在 {len(text.encode()) / 1e6:.2f} MB 上做 {merges_mixed} 次合并，用了 "
      f"{train_seconds:.1f} 秒 CPU 时间")
print(f"编码 {size:.2f} MB 英文：minillm 缓存为空时 {speed['minillm（缓存为空）']:.2f} MB/s，"
      f"缓存已热时 {speed['minillm（缓存已热）']:.2f} MB/s；Rust {speed['Rust 分词器']:.2f} MB/s；"
      f"minillm/Rust = {speed['minillm（缓存为空）'] / speed['Rust 分词器']:.2f}（缓存为空），"
      f"{speed['minillm（缓存已热）'] / speed['Rust 分词器']:.2f}（缓存已热）")
smol = dict(zip(groups, table[tok.name]))
print(f"SmolLM2 每个字符的词元数：英文 {smol['英文']:.2f}，简体中文 "
      f"{smol['简体中文']:.2f}，繁体中文 {smol['繁体中文']:.2f}")
print(f"你好，世界！：SmolLM2 {len(tok.encode(hello))} 个词元，混合语料的 BPE "
      f"{len(mixed.encode(hello))} 个，诗词的 BPE {len(poems.encode(hello))} 个")
