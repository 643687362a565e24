# 中文版 · 00_welcome_exercise.py 的译文。每个单元格标记里的 en=… 是它所译英文单元格的哈希；
# 流程见 docs/translating.md。

# %% [markdown] en=86c135cb
# # 练习 00 · 亲手走一遍推理路径
#
# 这里有三个任务，对应欢迎一节走过的那条路径上的三个环节：模型读到的对话提示词，从消息到回答
# 文本的完整路径，以及一次运行的解码速度。在各自的单元格里写好函数并运行，然后运行它下面的
# 检查单元格。检查会在多组输入上把你的函数和 minillm 自己的实现作对比，出错时直接告诉你
# 错在哪里。
#
# 也可以在终端里检查：`pytest --nbval-lax exercises/zh/00_welcome.ipynb`。

# %% en=5aa41237
import torch

import minillm
from minillm.course.checks import ch00_welcome as checks

model, tokenizer = minillm.load_reference("smollm2-135m")

# %% [markdown] en=75c13c5d
# ## 1 · 对话模板（chat template）拼出的提示词
#
# 对话模型读到的是一个字符串。SmolLM2 的模板（ChatML）把每条消息写成
#
# ```
# <|im_start|>ROLE
# CONTENT<|im_end|>
# ```
#
# 后面跟一个换行符；整个字符串以 `<|im_start|>assistant` 加一个换行符结尾，由此开启模型的
# 轮次。如果对话里没有系统消息，模板会先放上它默认的那一条：`<|im_start|>system`、一个换行符、
# `You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>`
# （意思是“你是一个名叫 SmolLM 的 AI 助手，由 Hugging Face 训练”），再加一个换行符。
#
# 请写出 `chat_prompt(messages)`，参数是由 `{"role": ..., "content": ...}` 字典组成的列表。
# 不要调用分词器自带的模板。

# %% [task] en=daa78190
def chat_prompt(messages):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def chat_prompt(messages):
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    parts = []
    if not messages or messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for message in messages:
        parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)

# %% [check] en=7070221f
checks.check_chat_prompt(chat_prompt)

# %% [markdown] en=95e72ea3
# 你拼出的字符串，和分词器自带的模板拼出的完全一样：

# %% en=d75ea140
# 问题的意思是“法国的首都是哪里？”
messages = [{"role": "user", "content": "What is the capital of France?"}]
try:
    print(chat_prompt(messages))
    print(chat_prompt(messages) == tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False))
except NotImplementedError:
    print("请先在上面写好 chat_prompt")

# %% [markdown] en=2f5bcce1
# ## 2 · 消息进，回答出
#
# 请写出 `answer(model, tokenizer, messages, max_new_tokens)`：它走完欢迎一节里的整条路径，
# 返回回答的文本。
#
# 1. 提示词：`tokenizer.apply_chat_template(messages, add_generation_prompt=True,
#    tokenize=False)`，也就是你的 `chat_prompt` 拼出的那个字符串；
# 2. 文本 → 词元：`tokenizer(prompt, return_tensors="pt").input_ids`；
# 3. 预填充和解码：在 `with torch.inference_mode():` 里调用
#    `model.generate(ids, max_new_tokens=..., do_sample=False)`（贪心解码）；
# 4. 词元 → 文本：**只解码新生成的词元**（提示词之后的那些 id），并传入
#    `skip_special_tokens=True`，这样轮次结束词元 `<|im_end|>` 就不会出现在回答里。

# %% [task] en=472fec02
def answer(model, tokenizer, messages, max_new_tokens):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def answer(model, tokenizer, messages, max_new_tokens):
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

# %% [check] en=70e6db86
checks.check_answer(answer, model, tokenizer)

# %% [markdown] en=68a09ed1
# ## 3 · 解码速度
#
# `token_times` 依次记录每个新词元出现的时刻（单位：秒），其中第一个来自预填充。
# 请写出 `decode_speed(token_times)`：返回解码阶段每秒生成的词元数，只数第一个*之后*的词元，
# 时间从第一个词元算到最后一个词元。少于两个词元时根本没有解码步，这时应抛出 `ValueError`。

# %% [task] en=055375d4
def decode_speed(token_times):
    # 在这里写你的代码
    raise NotImplementedError
# ==== solution ====
def decode_speed(token_times):
    if len(token_times) < 2:
        raise ValueError("至少要有两个词元的时刻，才能测出解码速度")
    return (len(token_times) - 1) / (token_times[-1] - token_times[0])

# %% [check] en=7f674f17
checks.check_decode_speed(decode_speed)

# %% [markdown] en=229e0a6e
# `minillm.generate` 会记下每个词元的时刻；它返回结果的 `.metrics` 用同样的方法算出这个速度
# （`decode_tokens_per_second`）。其余的测量指标由第 05 章来构建。
