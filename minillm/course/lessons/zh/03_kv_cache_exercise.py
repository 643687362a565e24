# 中文版 · 03_kv_cache_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=4534ef06
# # 练习 03 · KV 缓存、解码循环与在线 softmax
#
# 一共四道题：一个 KV 缓存（KV cache）有多大；缓存怎样存下新词元的键和值；生成循环本身
# （先预填充（prefill），再一次一个词元地解码（decode））；以及在分块到来的键上做注意力，
# 用的是 FlashAttention 的在线 softmax（online softmax，见第 03b 课）。在每道题的单元格里写好函数，
# 运行它，再运行下面的检查单元格。检查会用直白的话告诉你哪里不对。
#
# 也可以在终端里检查：`pytest --nbval-lax exercises/zh/03_kv_cache.ipynb`。

# %% en=763ab9ee
import math

import torch

import minillm
from minillm.course.checks import ch03_kv_cache as checks
from minillm.generation.kv_cache import KVCache

model, tokenizer = minillm.load("smollm2-135m", dtype=torch.float32, device="cpu")

# %% [markdown] en=bea074a2
# ## 1 · KV 缓存的大小
#
# 每个词元都会在每一层、为每个键/值头各留下一个键向量和一个值向量。
# 写出 `kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value)`：
# 一条序列的缓存所占的字节数，返回 int。

# %% [task] en=58736cfa
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, tokens, bytes_per_value):
    return 2 * n_layers * n_kv_heads * head_dim * tokens * bytes_per_value

# %% [check] en=09c6e5e8
checks.check_kv_cache_bytes(kv_cache_bytes)

# %% [markdown] en=cf81e5d2
# ## 2 · 更新缓存
#
# 缓存为每一层预先分配好 `keys` 和 `values`，形状为 (batch, kv_heads, max_tokens, head_dim)，
# 其中前 `length` 个位置已经填好。写出 `append_kv(keys, values, k, v, length)`：把形状为
# (batch, kv_heads, new_tokens, head_dim) 的新 `k` 和 `v` 存到位置 `length` 到
# `length + new_tokens - 1`，而且要**原地**写入（不新建张量：缓存不能每一步都复制一遍），
# 然后返回 (keys, values) 这一对，包含目前已填好的全部 `length + new_tokens` 个位置。
# 如果 `max_tokens` 放不下，抛出 `ValueError`。

# %% [task] en=1d3b636a
def append_kv(keys, values, k, v, length):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def append_kv(keys, values, k, v, length):
    end = length + k.shape[2]
    if end > keys.shape[2]:
        raise ValueError(f"缓存共 {keys.shape[2]} 个位置，已存 {length} 个，放不下再来的 "
                         f"{k.shape[2]} 个")
    keys[:, :, length:end] = k
    values[:, :, length:end] = v
    return keys[:, :, :end], values[:, :, :end]

# %% [check] en=2756014a
checks.check_append_kv(append_kv)

# %% [markdown] en=a92faa96
# ## 3 · 解码循环
#
# 写出 `greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids)`，返回新词元 id 的列表：
#
# 1. 建一个缓存：`cache = KVCache.for_model(model, batch_size=1, max_tokens=...)`；
# 2. 预填充：`logits = model(torch.tensor([prompt_ids]), cache=cache)` 跑完整个提示词并填好缓存；
#    最后一个位置的 logits，即 `logits[0, -1]`，给出第一个新词元（取 argmax）；
# 3. 解码：**只喂入最新的那个词元**，`model(torch.tensor([[token]]), cache=cache)`，再取 argmax，
#    直到凑够 `max_new_tokens` 个词元，或者刚选出的词元在 `eos_token_ids` 里（把这个 EOS 词元
#    留在结果里，然后停止）。
#
# 把循环包在 `with torch.inference_mode():` 里，这样 torch 不会保留梯度。

# %% [task] en=4ef79c9d
def greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def greedy_decode(model, prompt_ids, max_new_tokens, eos_token_ids):
    cache = KVCache.for_model(model, batch_size=1, max_tokens=len(prompt_ids) + max_new_tokens)
    new = []
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids]), cache=cache)  # 预填充
        while True:
            token = int(logits[0, -1].argmax())
            new.append(token)
            if token in eos_token_ids or len(new) == max_new_tokens:
                return new
            logits = model(torch.tensor([[token]]), cache=cache)  # 解码：只喂新词元

# %% [check] en=24838349
checks.check_greedy_decode(greedy_decode, model, tokenizer)

# %% [markdown] en=71813ef8
# 你的循环生成的内容和 `minillm.generate` 的一样。拿一个对话提示词试试；模型会用一个 EOS 词元
# 结束它的轮次：

# %% en=608845cd
# 问题的意思是“法国的首都是哪里？”
chat = tokenizer.encode(tokenizer.apply_chat_template(
    [{"role": "user", "content": "What is the capital of France?"}]))
try:
    print(tokenizer.decode(greedy_decode(model, chat, 24, list(model.config.eos_token_ids))))
except NotImplementedError:
    print("先在上面写好 greedy_decode")

# %% [markdown] en=2da4159f
# ## 4 · 一次一块地做注意力：在线 softmax
#
# 第 03b 课在一个想法之上搭出 FlashAttention，这个想法就是在线 softmax。这里你为单个查询写出它，
# 就像解码步分块读取缓存时可以做的那样。
#
# 写出 `attend_in_blocks(q, blocks)`。`q` 是一个查询，即 d 个数的向量。`blocks` 成对地给出键和值
# `(k, v)`，`k` 的形状为 (b, d)，`v` 的形状为 (b, d_v)，而且只能读一遍。返回在所有键上做注意力的
# 输出，即 d_v 个数的向量：softmax(K q / √d) V。在块与块之间，只保留三个累计量：
#
# - `m`：到目前为止最大的分数（初值 `float("-inf")`）；
# - `l`：到目前为止各个键的 e^(score − m) 之和（初值 0）；
# - `o`：e^(score − m) × 该键的值，逐个累加之和（初值 0；遇到第一块后它就成了 d_v 个数的向量）。
#
# 对每一块：分数 `s = k @ q / math.sqrt(d)`；`m_new = max(m, s.max().item())`；`l` 和 `o` 都乘上
# e^(m − m_new)，因为它们是相对旧的最大值累加的；再加上这一块的项 e^(s − m_new)：直接求和加进
# `l`，按 `v` 加权加进 `o`；最后令 `m = m_new`。全部处理完后返回 `o / l`。
#
# 不要把块存下来，也不要把它们拼起来（检查会盯着这一点）：一次只拿一块，正是这个方法的全部意义。

# %% [task] en=ef316d56
def attend_in_blocks(q, blocks):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def attend_in_blocks(q, blocks):
    m, l, o = float("-inf"), 0.0, 0.0
    for k, v in blocks:
        s = k @ q / math.sqrt(q.shape[0])
        m_new = max(m, s.max().item())
        rescale = math.exp(m - m_new)  # 第一块时为 0：还没有累加任何东西
        p = torch.exp(s - m_new)
        l = l * rescale + p.sum()
        o = o * rescale + p @ v
        m = m_new
    return o / l

# %% [check] en=00acb464
checks.check_attend_in_blocks(attend_in_blocks)

# %% [markdown] en=da3b4d9a
# 在 SmolLM2 的头宽度上试试你的函数：一个查询对 300 个随机的键和值，按每块 64 个读入，
# 再和 PyTorch 一次在全部键上做的注意力比较。

# %% en=a5384882
gen = torch.Generator().manual_seed(0)
d = model.config.head_dim
q, keys, values = torch.randn(d, generator=gen), torch.randn(300, d, generator=gen), \
    torch.randn(300, d, generator=gen)
whole = torch.nn.functional.scaled_dot_product_attention(q[None, None], keys[None], values[None])
try:
    pieces = ((keys[i:i + 64], values[i:i + 64]) for i in range(0, 300, 64))
    mine = attend_in_blocks(q, pieces)
    print(f"与一次性注意力相比的最大差值：{(mine - whole[0, 0]).abs().max():.1e}")
except NotImplementedError:
    print("先在上面写好 attend_in_blocks")
