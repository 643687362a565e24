"""Send a workload to an OpenAI-compatible server and time every answer.

Before the test, a few one-token requests find which spellings of "answer exactly max_tokens
tokens" the server accepts (full_length.py); their prompt is not one of the test's, so no prefix
cache holds a test prompt. For each request the client notes when it sent it and when each
streamed piece of text arrived. A server may send several tokens in one event (or one token as
several); the token count is the server's `usage.completion_tokens` when it reports one, else the
answer's text counted with the tokenizer (tokens.py). The tokens are then placed at the first
piece's time, the last piece's time, and evenly between, so that minillm.measure.metrics' definitions
give

    TTFT      first piece - sent                  (what the user waits before text appears)
    TPOT      (last piece - first piece) / (n - 1)
    latency   the answer complete - sent

exactly as for a request timed inside the engine. Throughput is all output tokens over the wall
time from the first request sent to the last answer complete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field

from ...measure.metrics import RequestMetrics
from .tokens import DEFAULT_TOKENIZER
from .workload import Workload


@dataclass
class RequestResult:
    """One request as the client saw it."""

    index: int
    start: float
    end: float = 0.0
    chunk_times: list = field(default_factory=list)
    text: str = ""
    prompt_tokens: int | None = None
    output_tokens: int = 0
    prompt_tokens_by: str | None = None  # "server", "tokenizer" or "unknown" (see tokens.py)
    output_tokens_by: str | None = None  # "server", "tokenizer", "events" or "unknown"
    finish_reason: str | None = None
    response_id: str | None = None
    status: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def metrics(self, streamed: bool = True) -> RequestMetrics:
        """minillm.measure.metrics.RequestMetrics for this request (the token times as said above).
        Without streaming only the latency is known: no token times."""
        n, chunks = self.output_tokens, self.chunk_times
        if not streamed or not chunks or n < 1:
            times: tuple = ()
        elif n == len(chunks):
            times = tuple(chunks)
        elif n == 1:
            times = (chunks[0],)
        else:
            first, last = chunks[0], chunks[-1]
            times = tuple(first + (last - first) * i / (n - 1) for i in range(n))
        return RequestMetrics(self.start, times, self.prompt_tokens or 0,
                              end=max(self.end, *times) if times else self.end)


def _piece(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    return (choice.get("delta") or {}).get("content") or ""


async def send_one(client, url: str, body: dict, index: int) -> RequestResult:
    """POST one request; never raises for the server's or the network's failures: they are
    recorded in `error`."""
    import httpx

    result = RequestResult(index, time.perf_counter())
    try:
        if body.get("stream"):
            async with client.stream("POST", url, json=body) as response:
                result.status = response.status_code
                if response.status_code != 200:
                    raw = (await response.aread())[:300].decode(errors="replace")
                    raise _Failed(f"HTTP {response.status_code}: {raw}")
                done = False
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    event = json.loads(data)
                    if "error" in event:
                        raise _Failed(f"error event: {event['error']}")
                    result.response_id = result.response_id or event.get("id")
                    if event.get("usage"):
                        _read_usage(result, event["usage"])
                    for choice in event.get("choices") or ():
                        piece = _piece(choice)
                        if piece:
                            result.chunk_times.append(time.perf_counter())
                            result.text += piece
                        result.finish_reason = choice.get("finish_reason") or result.finish_reason
                if not done:
                    raise _Failed("the stream ended without data: [DONE]")
                if result.output_tokens_by is None:
                    result.output_tokens, result.output_tokens_by = len(result.chunk_times), \
                        "events"
        else:
            response = await client.post(url, json=body)
            result.status = response.status_code
            if response.status_code != 200:
                raise _Failed(f"HTTP {response.status_code}: {response.text[:300]}")
            answer = response.json()
            choice = answer["choices"][0]
            result.text = choice.get("text") or (choice.get("message") or {}).get("content", "")
            result.finish_reason = choice.get("finish_reason")
            result.response_id = answer.get("id")
            _read_usage(result, answer.get("usage") or {})
            result.output_tokens_by = result.output_tokens_by or "unknown"
    except _Failed as error:
        result.error = str(error)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError, TypeError) as error:
        result.error = f"{type(error).__name__}: {error}"
    result.end = time.perf_counter()
    return result


class _Failed(Exception):
    pass


def _read_usage(result: RequestResult, usage: dict) -> None:
    if usage.get("prompt_tokens") is not None:
        result.prompt_tokens, result.prompt_tokens_by = usage["prompt_tokens"], "server"
    if usage.get("completion_tokens") is not None:
        result.output_tokens, result.output_tokens_by = usage["completion_tokens"], "server"


async def find_model(client, base_url: str) -> str | None:
    """The first model /v1/models lists (None if the server has no such route)."""
    import httpx

    try:
        response = await client.get(base_url.rstrip("/") + "/v1/models")
        if response.status_code == 200:
            data = response.json().get("data") or []
            return data[0]["id"] if data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        pass
    return None


async def run_async(base_url: str, workload: Workload, model: str | None = None,
                    progress: bool = False, api_key: str | None = None,
                    tokenizer=DEFAULT_TOKENIZER) -> dict:
    """Send `workload` to the server at `base_url`; return the report (see report.summarize).
    `tokenizer` counts tokens where the server sends no usage (see tokens.TokenCounter)."""
    import httpx

    from .full_length import Probe, probe
    from .report import summarize
    from .tokens import TokenCounter, fill_missing_counts

    base_url = base_url.rstrip("/")
    prompts, arrivals = workload.prompts(), workload.arrivals()
    probe_prompt = dataclasses.replace(workload, requests=workload.requests + 1).prompts()[-1]
    url = base_url + workload.path
    limits = httpx.Limits(max_connections=workload.concurrency,
                          max_keepalive_connections=workload.concurrency)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    results: list[RequestResult] = []
    async with httpx.AsyncClient(limits=limits, timeout=workload.timeout_s,
                                 headers=headers) as client:
        if model is None:
            model = await find_model(client, base_url)
        asked = Probe()
        if workload.full_length:
            asked = await probe(lambda body: send_one(client, url, body, -1), workload, model,
                                probe_prompt)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=workload.requests, desc="requests", unit="req")
        slots = asyncio.Semaphore(workload.concurrency)
        began = time.perf_counter()
        deadline = began + workload.max_seconds

        async def one(i):
            async with slots:
                if time.perf_counter() > deadline:
                    r = RequestResult(i, time.perf_counter(), time.perf_counter(),
                                      error="not sent: the test's time limit (max_seconds) "
                                            "was reached")
                else:
                    r = await send_one(client, url,
                                       workload.payload(prompts[i], model, asked.sent), i)
            results.append(r)
            if bar is not None:
                bar.update(1)

        tasks = []
        for i, at in enumerate(arrivals):
            wait = began + at - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(min(wait, max(0.0, deadline - time.perf_counter())))
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        seconds = time.perf_counter() - began
    if bar is not None:
        bar.close()
    results.sort(key=lambda r: r.index)
    counter = TokenCounter(tokenizer)
    chat = workload.endpoint == "chat"
    fill_missing_counts(results, prompts, chat, counter)
    return summarize(results, workload, seconds, base_url, model, probe=asked,
                     tokenizer=counter.summary(probe_prompt, chat, asked.prompt_tokens))


def run(base_url: str, workload: Workload | None = None, *, model: str | None = None,
        progress: bool = False, api_key: str | None = None, tokenizer=DEFAULT_TOKENIZER,
        **settings) -> dict:
    """Run a load test and return its report (see `report.summarize`). `settings` build the
    Workload when none is given. `tokenizer` (a name or path `minillm.load_tokenizer` reads, or
    a tokenizer) counts tokens where the server sends no usage; it is loaded only then. Works
    inside Jupyter too (it runs in its own thread)."""
    workload = workload or Workload(**settings)
    out: dict = {}

    def target():
        try:
            out["report"] = asyncio.run(run_async(base_url, workload, model, progress, api_key,
                                                  tokenizer))
        except BaseException as error:  # handed to the caller's thread
            out["error"] = error

    thread = threading.Thread(target=target, name="minillm-loadtest")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["report"]
