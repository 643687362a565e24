"""The HTTP app (FastAPI): the chapter 06 engine behind the OpenAI API.

    GET  /health                 "ok" while the engine thread runs, and its counters
    GET  /metrics                Prometheus text, vLLM's names: running, waiting, KV cache, tokens,
                                 TTFT, TPOT, latency, queue time, preemptions, prefix cache
    GET  /v1/models              the model served, its context length and weights, and each LoRA
                                 adapter the engine serves beside it (`parent`: the model)
    POST /v1/completions         continue a prompt          (stream: true -> server-sent events)
    POST /v1/chat/completions    answer a conversation      (stream: true -> server-sent events)

A request's `model` names the model or one of the engine's LoRA adapters (vLLM's
`--lora-modules`): the adapter's name runs the request with that adapter, any other name is a 404.

A streamed answer is a series of `data: {json}` events, one per engine step that made text ready,
then `data: [DONE]`: the shape OpenAI's client libraries and load tools read. Every body and
chunk is a model of responses.py. Bad requests get a 4xx answer with OpenAI's error body; the
server never answers a client's mistake with a 500. docs/server.md lists what is supported.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...decoding import MinNewTokensProcessor, ProcessorList, SchemaError, make_json_constraint
from ...decoding.grammar_backend import check_grammar_backend
from ...generation.request import eos_ids, encode_prompts
from .answers import ChatAnswer, CompletionAnswer, merge_completions
from .logprobs import TokenText
from .protocol import (APIError, ChatCompletionRequest, CompletionRequest, DetokenizeRequest,
                       TokenizeRequest, error_body)
from .responses import (DetokenizeResponse, Health, ModelCard, ModelList, TokenizeResponse,
                        TokenizerInfo)
from .runner import EngineLoop, now

log = logging.getLogger("minillm.server")
IGNORED_HEADER = "X-Minillm-Ignored-Fields"

MAX_BODY_BYTES = 1 << 20  # 1 MiB of JSON is far more than any prompt the context window holds


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets 413 before it is parsed."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        too_big = length is not None and length.isdigit() and int(length) > self.limit
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge()
            return message

        if not too_big:
            try:
                return await self.app(scope, limited_receive, send)
            except _TooLarge:
                pass
        response = JSONResponse(error_body(f"the request body is over {self.limit} bytes"),
                                status_code=413)
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


class APIKey:
    """ASGI middleware: a request to /v1/... without `Authorization: Bearer <key>` gets 401 in
    OpenAI's error shape. /health and /metrics stay open (probes and scrapers carry no key)."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        message = ("no API key given: send the header 'Authorization: Bearer <key>'" if not given
                   else "the API key is wrong")
        response = JSONResponse(error_body(message, code="invalid_api_key"), status_code=401)
        await response(scope, receive, send)


def _validation_message(errors) -> tuple[str, str | None]:
    """Pydantic's errors in one sentence, naming the fields."""
    parts, param = [], None
    for e in errors:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        where = ".".join(loc) or "body"
        param = param or (loc[0] if loc else None)
        if e.get("type") == "json_invalid":
            return ("the body is not valid JSON: " + e.get("msg", "") +
                    f" (at character {loc[-1] if loc else '?'})"), None
        if e.get("type") == "value_error":  # a check of ours: its message names the field
            parts.append(str(e.get("ctx", {}).get("error", e.get("msg"))))
        elif e.get("type") == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        elif e.get("type") == "missing":
            parts.append(f"{where} is required")
        else:
            parts.append(f"{where}: {e.get('msg')} (got {e.get('input')!r})"[:300])
    return "invalid request: " + "; ".join(parts), param


def create_app(engine, model_name: str = "minillm", *, default_max_tokens: int = 256,
               max_body_bytes: int = MAX_BODY_BYTES, api_key: str | None = None,
               grammar_backend: str = "minillm") -> FastAPI:
    """The app serving `engine` (a minillm.engine.Engine) as `model_name`, and each LoRA adapter
    of the engine's `lora` under its own name; with `api_key`, the /v1 routes need it as a bearer
    token; `grammar_backend` computes response_format's token masks
    (minillm.decoding.grammar_backend: "minillm" or "llguidance", which must be installed).
    The engine thread starts with the app (uvicorn's lifespan) and stops with it."""
    if check_grammar_backend(grammar_backend) == "llguidance":
        from ...decoding.llguidance_constraint import import_llguidance

        import_llguidance()  # missing: the ImportError that names the extra, before serving
    lora = getattr(engine, "lora", None)
    adapters = list(lora.names) if lora is not None else []
    if model_name in adapters:
        raise ValueError(f"a LoRA adapter is named {model_name!r}, as the model is: give one of "
                         "them another name (--lora NAME=PATH, --served-model-name)")
    served = repr(model_name) + (f" and its LoRA adapters {', '.join(map(repr, adapters))}"
                                 if adapters else "")
    loop = EngineLoop(engine, model_name=model_name)

    @asynccontextmanager
    async def lifespan(app):
        loop.start()
        try:
            yield
        finally:
            loop.stop()

    app = FastAPI(title="minillm", lifespan=lifespan,
                  description="The course's engine behind the OpenAI API")
    app.state.loop = loop
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    if api_key is not None:
        if not api_key.strip():
            raise ValueError("the API key is empty: give a non-empty key, or none to leave the "
                             "server open")
        app.add_middleware(APIKey, key=api_key)
    context = engine.max_seq_len
    tokenizer = engine.tokenizer
    token_text = TokenText(tokenizer)
    started = now()

    # --- errors, all in OpenAI's shape ---------------------------------------------------

    @app.exception_handler(APIError)
    async def _api_error(request, error: APIError):
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, error: RequestValidationError):
        message, param = _validation_message(error.errors())
        return JSONResponse(error_body(message, param=param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, error: StarletteHTTPException):
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        detail = error.detail if isinstance(error.detail, str) else json.dumps(error.detail)
        if error.status_code == 404:
            detail = (f"no route {request.method} {request.url.path}; the routes are /health, "
                      "/metrics, /v1/models, /v1/completions, /v1/chat/completions, /tokenize, "
                      "/detokenize and /tokenizer_info")
        return JSONResponse(error_body(detail, kind), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def _bug(request, error: Exception):  # a bug of ours: say so, show no traceback
        return JSONResponse(error_body(f"internal error ({type(error).__name__})",
                                       "server_error"), status_code=500)

    # --- routes ------------------------------------------------------------------------------

    @app.get("/health")
    async def health():
        status = 200 if loop.alive else 503
        body = Health(status="ok" if loop.alive else "engine stopped", model=model_name,
                      **loop.stats())
        return JSONResponse(body.json_body(), status_code=status)

    @app.get("/metrics")
    async def metrics():
        data = await asyncio.to_thread(loop.metrics.exposition)
        return Response(data, media_type=loop.metrics.content_type)

    @app.get("/v1/models")
    async def models():
        card = ModelCard(id=model_name, created=started, max_model_len=context,
                         weights=engine.weights)
        return ModelList(data=[card] + [card.model_copy(update={"id": name, "parent": model_name})
                                        for name in adapters]).json_body()

    logged_ignored: set[str] = set()

    def check_model(body):
        """The model's name, n, and the fields the server ignores (logged once per name);
        returns the name to answer as, the LoRA adapter it runs (None: the model alone) and the
        headers that name the ignored fields."""
        ignored = body.ignored_fields() if hasattr(body, "ignored_fields") else []
        for name in sorted(set(ignored) - logged_ignored):
            log.warning("minillm serve: ignoring the request field %r, which this server does "
                        "not know (said once; each answer names them in %s)", name,
                        IGNORED_HEADER)
            logged_ignored.add(name)
        adapter = body.model if body.model in adapters else None
        if body.model is not None and body.model != model_name and adapter is None:
            raise APIError(404, f"the model {body.model!r} does not exist here; this server "
                                f"serves {served} (see /v1/models)", "model",
                           "not_found_error", "model_not_found")
        if getattr(body, "n", 1) > engine.max_num_seqs:
            raise APIError(400, f"n={body.n} is above this server's limit of "
                                f"{engine.max_num_seqs} samples per request (its "
                                "--max-num-seqs: the n samples run in one batch)", "n")
        headers = {IGNORED_HEADER: ", ".join(ignored)} if ignored else {}
        return adapter or model_name, adapter, headers

    def processors(body, ids, config, constraint=None):
        """min_tokens as a processor of this request, before response_format's constraint."""
        chain = []
        if body.min_tokens:
            chain.append(MinNewTokensProcessor(body.min_tokens,
                                               eos_ids(engine.model, tokenizer, config),
                                               prompt_length=len(ids)))
        if constraint is not None:
            chain.append(constraint)
        return None if not chain else chain[0] if len(chain) == 1 else ProcessorList(chain)

    async def prepare(body, prompt, max_tokens, default, length_field="max_tokens"):
        """Token ids and the engine config; the prompt's length decides the default length."""
        try:
            ids = (await asyncio.to_thread(encode_prompts, tokenizer, prompt,
                                           engine.model.config.vocab_size))[0][0]
        except (ValueError, TypeError) as error:
            raise APIError(400, str(error), "prompt") from None
        room = context - len(ids)
        if room < 1:
            raise APIError(400, f"the prompt has {len(ids)} tokens; the model's context window "
                                f"is {context} tokens, with room for at least one new token",
                           "prompt", code="context_length_exceeded")
        if max_tokens is None:
            max_tokens = min(default, room)
        elif max_tokens > room:
            raise APIError(400, f"{length_field}={max_tokens} is too large: the prompt has "
                                f"{len(ids)} tokens and the context window {context}, so at "
                                f"most {room} new tokens fit", length_field,
                           code="context_length_exceeded")
        return ids, body.generation_config(max_tokens)

    async def response_constraint(body, config):
        """The logits processor for response_format (None for plain text)."""
        fmt = body.response_format
        if fmt is None or fmt.type == "text":
            return None
        schema = fmt.json_schema.schema_ if fmt.type == "json_schema" else None
        eos = eos_ids(engine.model, tokenizer, config)
        try:  # the first one reads the vocabulary into a trie: about a second, off the loop
            return await asyncio.to_thread(make_json_constraint, tokenizer, schema, eos,
                                           backend=grammar_backend)
        except (SchemaError, ValueError) as error:
            raise APIError(400, f"response_format: {error}", "response_format") from None

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        name, adapter, headers = check_model(body)
        scoring_only = body.echo and body.max_tokens == 0  # generate one token, show none
        length = 1 if scoring_only else body.max_tokens
        prepared = [await prepare(body, p, length, 16) for p in body.prompts()]
        started = []
        try:  # every prompt is checked before any reaches the engine
            for ids, config in prepared:
                started.append(await start_completion(body, ids, config, scoring_only, name,
                                                      adapter))
            if len(started) == 1:
                return await _respond(request, body, *started[0], headers)
            wholes = []
            for answer, queue in started:
                whole = await _collect(request, answer, queue)
                if isinstance(whole, JSONResponse):
                    return whole  # the client hung up
                wholes.append(whole)
            return JSONResponse(merge_completions(wholes, body.n).json_body(), headers=headers)
        finally:
            if len(started) > 1:
                for answer, _ in started:
                    loop.abort(answer.rid)

    async def start_completion(body, ids, config, scoring_only, name, adapter):
        prompt_logprobs = body.logprobs if body.echo else None
        rid, queue = await loop.submit(ids, config, "cmpl", n=body.n, logprobs=body.logprobs,
                                       prompt_logprobs=prompt_logprobs, adapter=adapter,
                                       logits_processor=processors(body, ids, config))
        answer = CompletionAnswer(rid, now(), name, body.n, ids, token_text,
                                  body.logprobs is not None, not scoring_only, echo=body.echo,
                                  prompt_text=tokenizer.decode(ids) if body.echo else "")
        return answer, queue

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        name, adapter, headers = check_model(body)
        body.check()
        if not hasattr(tokenizer, "apply_chat_template"):
            raise APIError(400, f"{model_name} has no chat template: use /v1/completions")
        try:
            text = tokenizer.apply_chat_template(body.conversation())
        except (ValueError, TypeError) as error:
            raise APIError(400, f"the chat template failed: {error}", "messages") from None
        ids, config = await prepare(body, text, body.answer_length, default_max_tokens,
                                    body.length_field)
        constraint = await response_constraint(body, config)
        top = (body.top_logprobs or 0) if body.logprobs else None
        rid, queue = await loop.submit(ids, config, "chatcmpl", n=body.n, logprobs=top,
                                       adapter=adapter,
                                       logits_processor=processors(body, ids, config,
                                                                   constraint))
        answer = ChatAnswer(rid, now(), name, body.n, ids, token_text, body.logprobs)
        return await _respond(request, body, answer, queue, headers)

    async def _respond(request, body, answer, queue, headers):
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(_events(answer, queue, usage),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", **headers})
        whole = await _collect(request, answer, queue)
        return whole if isinstance(whole, JSONResponse) else \
            JSONResponse(whole.json_body(), headers=headers)

    # --- the tokenizer, as vLLM serves it --------------------------------------------------

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        check_model(body)
        if body.messages is not None:
            if not hasattr(tokenizer, "apply_chat_template"):
                raise APIError(400, f"{model_name} has no chat template: send a prompt",
                               "messages")
            text = tokenizer.apply_chat_template(
                body.conversation(), add_generation_prompt=body.add_generation_prompt)
        else:
            text = body.prompt
        ids = (await asyncio.to_thread(encode_prompts, tokenizer, text))[0][0] if text else []
        return TokenizeResponse(count=len(ids), max_model_len=context, tokens=list(ids),
                                token_strs=[token_text.text(i) for i in ids]
                                if body.return_token_strs else None).json_body()

    @app.get("/tokenizer_info")
    async def tokenizer_info():
        def token(name):
            token_id = getattr(tokenizer, name, None)
            return None if token_id is None else token_text.text(token_id)

        template = getattr(tokenizer, "chat_template", None)
        return TokenizerInfo(tokenizer_class=type(tokenizer).__name__,
                             eos_token=token("eos_token_id"), bos_token=token("bos_token_id"),
                             pad_token=token("pad_token_id"),
                             chat_template=template if isinstance(template, str) else None,
                             model_max_length=context,
                             vocab_size=engine.model.config.vocab_size).json_body()

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest):
        check_model(body)
        vocab = engine.model.config.vocab_size
        bad = [t for t in body.tokens if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"tokens {bad[:5]} are outside the vocabulary of {vocab} ids",
                           "tokens")
        return DetokenizeResponse(prompt=tokenizer.decode(body.tokens)).json_body()

    async def _collect(request, answer, queue):
        """The whole answer once its n samples have finished (499 if the client hangs up)."""
        finals: dict[int, object] = {}
        try:
            while len(finals) < answer.n:
                try:  # wake now and then to notice a client that hung up
                    item = await asyncio.wait_for(queue.get(), timeout=1.0)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return JSONResponse(error_body("client disconnected"), status_code=499)
                    continue
                if isinstance(item, Exception):
                    raise APIError(500, f"the engine failed: {type(item).__name__}: {item}",
                                   type="server_error")
                if item.finished:
                    finals[item.index] = item
        finally:
            if len(finals) < answer.n:
                loop.abort(answer.rid)
        return answer.whole([finals[i] for i in range(answer.n)])

    async def _events(answer, queue, include_usage):
        for chunk in answer.start():
            yield chunk.sse()
        finals = []
        try:
            async for out in loop.outputs(answer.rid, queue, answer.n):
                for chunk in answer.chunks(out):
                    yield chunk.sse()
                if out.finished:
                    finals.append(out)
            if include_usage:
                yield answer.usage_chunk(finals).sse()
        except APIError as error:  # the status line is sent already: say it in the stream
            yield f"data: {json.dumps(error.body())}\n\n"
        yield "data: [DONE]\n\n"

    return app


__all__ = ["create_app", "MAX_BODY_BYTES"]
