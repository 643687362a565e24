"""The tools wing: what runs the engine for people, not what a lesson builds.

    cli.py      `python -m minillm <command>`: fetch, doctor, progress, bench, serve
    doctor.py   `python -m minillm doctor`: is this machine ready for the course?
    progress.py `python -m minillm progress`: which exercises pass so far
    bench/      benchmarks: `bench latency` (minillm against transformers and llama.cpp), and
                the drivers chapters 06-08 and scripts/ measure with (batching, quantization,
                speculative decoding)
    server/     `python -m minillm serve`: the chapter 06 engine behind the OpenAI API
    loadtest/   `python -m minillm bench serve`: a load client for any OpenAI-compatible server

The engine (everything in minillm/ outside tools/ and course/) never imports this wing.
"""
