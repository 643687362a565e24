# 中文版 · 10_interview_qa_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=cfc6f2ed
# # 练习 10 · 面试题（interview questions）：白板上的估算
#
# 面试官希望你一分钟之内、不用电脑、凭一个公式算出三个数：一个大模型最快能解码多快，它的 KV 缓存能同时放下多少个请求，推测解码能带来多少收益。把每个估算写成一个小函数，先预测答案，再运行它下面的检查单元格：检查器会在几个用例上试你的函数，并直白地告诉你哪里不对。
#
# 在终端里检查你的作业：`pytest --nbval-lax exercises/zh/10_interview_qa.ipynb`。

# %% en=7d2f2cc2
import dataclasses

from minillm.course.checks import ch10_interview as checks

GB, TB = 1e9, 1e12  # 按 GPU 厂商的算法（1 GB = 10^9 字节）

# %% [markdown] en=9920fdec
# ## 1 · 70B 模型在 4 块 GPU 上的解码上限（Q17、Q24）
#
# 批大小为 1 时，每个解码步都要把每个权重读一遍，决定速度的是读取而不是算术。用张量并行（tensor parallelism）分到 n 块 GPU 上时，每块 GPU 存每个权重矩阵的 1/n，并与其他 GPU 同时读自己那一份。写出 `tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth)`：每秒最多能生成多少个词元，其中 `bandwidth` 是一块 GPU 每秒能读的字节数。不考虑全归约（all-reduce）和 KV 缓存（它们只会让上限更低）。先预测：70B 模型用 fp8（每个参数 1 字节），放在 4 块每块 3.35 TB/s 的 GPU 上，是多少？

# %% [task] en=aac75feb
def tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def tp_decode_bound(n_params, bytes_per_param, n_gpus, bandwidth):
    bytes_per_gpu = n_params * bytes_per_param / n_gpus
    return bandwidth / bytes_per_gpu

# %% [check] en=a2f8e4e8
checks.check_tp_decode_bound(tp_decode_bound)

# %% [markdown] en=fdeac61b
# 几种配置下的上限。真实系统只能达到其中一部分：全归约、KV 缓存和每一步的固定开销都要花时间。

# %% en=955cc3f5
try:
    for params, size, gpus, label in [(70e9, 1, 4, "70B fp8，4 块 GPU"),
                                      (70e9, 2, 4, "70B bf16，4 块 GPU"),
                                      (70e9, 1, 8, "70B fp8，8 块 GPU"), (8e9, 2, 1, "8B bf16，1 块 GPU")]:
        print(f"{label:>17}：最多 {tp_decode_bound(params, size, gpus, 3.35 * TB):6.0f} "
              "词元/秒（每块 GPU 3.35 TB/s）")
except NotImplementedError:
    print("先在上面写好 tp_decode_bound")

# %% [markdown] en=0f67dc7d
# ## 2 · 80 GB 的 KV 缓存池最多能放多大的批（Q5、Q13）
#
# 每条序列的每个词元，在每一层、每个键/值头上都要存一个键向量和一个值向量。一台服务器给 KV 缓存（KV cache）分了 `pool_bytes` 字节，它能同时运行的序列数，就是能完整放进去的序列数。写出 `max_batch(pool_bytes, config, tokens, bytes_per_value)`，序列长度为 `tokens` 个词元，`config` 是一个 `minillm.model.ModelConfig`（字段有 `n_layers`、`n_kv_heads`、`head_dim` 等）。先预测：Llama-3-70B，8,192 个词元的序列，用 fp16，放进 GPU 上扣除权重后剩下的 80 GB，能放几条？

# %% [task] en=64529187
def max_batch(pool_bytes, config, tokens, bytes_per_value):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def max_batch(pool_bytes, config, tokens, bytes_per_value):
    per_sequence = (2 * config.n_layers * config.n_kv_heads * config.head_dim * tokens
                    * bytes_per_value)
    return int(pool_bytes // per_sequence)

# %% [check] en=96cdb61f
checks.check_max_batch(max_batch)

# %% [markdown] en=1322f2f1
# 分组查询注意力（grouped-query attention）和 8 比特缓存在这里各值多少：

# %% en=f81803a0
try:
    llama70 = checks.PARAM_CONFIGS["Llama-3-70B"]
    print(f"Llama-3-70B（{llama70.n_heads} 个查询头，{llama70.n_kv_heads} 个 KV 头），8,192 "
          f"个词元，80 GB：fp16 能放 {max_batch(80 * GB, llama70, 8192, 2)} 条序列，"
          f"fp8 能放 {max_batch(80 * GB, llama70, 8192, 1)} 条")
    every_head = dataclasses.replace(llama70, n_kv_heads=llama70.n_heads)
    print(f"  如果每个查询头都有自己的 K/V 头：fp16 能放 {max_batch(80 * GB, every_head, 8192, 2)} 条")
except NotImplementedError:
    print("先在上面写好 max_batch")

# %% [markdown] en=17eef72a
# ## 3 · α = 0.7、k = 4 时推测解码能带来多少收益（Q22、Q32）
#
# 草稿（draft）提出 k 个词元，目标模型（target model）在一次前向传播里把它们全部检查一遍。如果每个草稿词元被接受的概率都是 α，且相互独立，那么一轮得到的是被接受的前缀，再加一个目标模型自己的词元。一轮的代价是一个目标模型步，加上 k 个草稿步，每个草稿步相当于 `draft_cost` 个目标模型步。写出 `speculative_speedup(alpha, k, draft_cost)`：一轮平均得到的词元数，除以这一轮以目标模型步计的代价（普通解码每个目标模型步产生一个词元）。先预测：α = 0.7，k = 4，草稿不花时间，是多少？

# %% [task] en=4fd09636
def speculative_speedup(alpha, k, draft_cost):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def speculative_speedup(alpha, k, draft_cost):
    tokens = sum(alpha ** i for i in range(k + 1))  # 1 + alpha + ... + alpha^k
    return tokens / (1 + k * draft_cost)

# %% [check] en=be991aec
checks.check_speculative_speedup(speculative_speedup)

# %% [markdown] en=337ea9f3
# 一旦草稿要花时间，草稿词元并不是越多越好：下面是几种草稿下最好的 k。

# %% en=d327414b
try:
    for alpha, cost in [(0.7, 0.0), (0.7, 0.05), (0.7, 0.3), (0.9, 0.05)]:
        gains = {k: speculative_speedup(alpha, k, cost) for k in range(1, 11)}
        best = max(gains, key=gains.get)
        print(f"alpha {alpha}，草稿代价 {cost}：k = 4 时为 {gains[4]:.2f}x；这里最好的 k 是 "
              f"{best}，{gains[best]:.2f}x")
except NotImplementedError:
    print("先在上面写好 speculative_speedup")
