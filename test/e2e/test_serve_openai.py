"""End-to-end: `llmc-rt serve` (the runtime-only binary) on SmolLM2-135M-
Instruct, driven by the `openai` Python client from PyPI.

- /health, /v1/models (the artifact's name), /metrics (Prometheus text);
- completions and chat completions at temperature 0 give exactly the text
  of `llmc run` (with --chat for chat) alone;
- a streamed chat completion's deltas join to the non-streamed content,
  over several chunks, ending with a finish_reason and [DONE];
- 16 concurrent completions (different prompts) run in shared batches
  (llmc_batch_size_max > 1) and each equals `llmc run` alone;
- stop strings cut the text before the stop string (finish_reason stop);
  a seed makes sampling repeatable;
- errors: max_tokens past the context and unsupported n=2 are 400s with an
  OpenAI error body (openai.BadRequestError), a body that is not JSON is a
  400, an unknown path a 404; a full queue answers 429 (a second server
  with --max-batch 1 --max-queue 1);
- chats sharing a long system prompt: the later ones take its KV blocks
  from the prefix cache (the hit counter grows by whole blocks) and equal
  `llmc run --chat --system` alone; finished sequences hold no block;
- a streaming client that disconnects frees its sequence
  (llmc_running_sequences back to 0 long before its max_tokens), and so
  does a non-streamed one (within 2 s of closing its connection);
- SIGTERM while a request runs: that request still completes (200), then
  the server exits 0.
"""
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a little robot",
           "Explain what a compiler does.", "1, 2, 3, 4,", "The quick brown fox",
           "In 1969, astronauts", "Water boils at", "My favourite colour is",
           "import numpy as np\n", "The best way to learn", "Dear Sir or Madam,",
           "Photosynthesis is", "Paris and London are", "The answer to 2 + 2 is",
           "A haiku about autumn:"]


class Served:
    """An `llmc-rt serve` process on a free port."""

    def __init__(self, artifact, *extra):
        self.proc = subprocess.Popen([harness.llmc_rt_bin(), "serve", artifact, "--port", "0",
                                      *extra], stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body: bytes):
        req = urllib.request.Request(self.url + path, data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name):
        _, text = self.get("/metrics")
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def run_alone(artifact, prompt, n, chat=False, system=None):
    args = ["run", artifact, "-p", prompt, "-n", str(n), "-q"] + (["--chat"] if chat else [])
    args += ["--system", system] if system else []
    out = harness.run_llmc(args, timeout=300).stdout
    return out[:-1] if out.endswith("\n") else out


def api_checks(checks, srv, client, art, openai):
    status, body = srv.get("/health")
    checks.check(status == 200 and json.loads(body)["status"] == "ok", "/health", body)
    models = [m.id for m in client.models.list().data]
    checks.check(models == ["smollm2"], "/v1/models lists the artifact", str(models))
    n = 24
    c = client.completions.create(model="smollm2", prompt=PROMPTS[0], max_tokens=n,
                                  temperature=0)
    ref = run_alone(art, PROMPTS[0], n)
    checks.check(c.choices[0].text == ref and c.usage.completion_tokens > 0,
                 "completion at temperature 0 equals `llmc run`", repr(c.choices[0].text[:60]))
    question = "What is the capital of France?"
    msgs = [{"role": "user", "content": question}]
    ch = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=n,
                                        temperature=0)
    ref_chat = run_alone(art, question, n, chat=True)
    checks.check(ch.choices[0].message.content == ref_chat, "chat completion equals `llmc run --chat`",
                 repr(ch.choices[0].message.content[:60]) + " vs " + repr(ref_chat[:60]))
    parts, finish = [], None
    for ev in client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=n,
                                             temperature=0, stream=True):
        if ev.choices:
            parts.append(ev.choices[0].delta.content or "")
            finish = ev.choices[0].finish_reason or finish
    checks.check("".join(parts) == ch.choices[0].message.content and len(parts) > 3 and finish,
                 "streamed chat deltas join to the same content",
                 f"{len(parts)} chunks, finish {finish}")
    long_n = 96  # this chat answer ends with a stop token after ~9 tokens
    one_word = [{"role": "user", "content": "Answer with one word: what color is the sky?"}]
    short = client.chat.completions.create(model="smollm2", messages=one_word, max_tokens=long_n,
                                           temperature=0)
    past = client.chat.completions.create(model="smollm2", messages=one_word, max_tokens=long_n,
                                          temperature=0, extra_body={"ignore_eos": True})
    checks.check(short.choices[0].finish_reason == "stop" and
                 short.usage.completion_tokens < long_n and
                 past.choices[0].finish_reason == "length" and
                 past.usage.completion_tokens == long_n and
                 past.choices[0].message.content.startswith(short.choices[0].message.content),
                 "ignore_eos generates past the stop token, to max_tokens",
                 f"{short.usage.completion_tokens} tokens ({short.choices[0].finish_reason}) vs "
                 f"{past.usage.completion_tokens} ({past.choices[0].finish_reason})")
    full = client.completions.create(model="smollm2", prompt=PROMPTS[2], max_tokens=40,
                                     temperature=0).choices[0].text
    cut = client.completions.create(model="smollm2", prompt=PROMPTS[2], max_tokens=40,
                                    temperature=0, stop=["."])
    want = full.split(".")[0]
    checks.check("." in full and cut.choices[0].text == want and
                 cut.choices[0].finish_reason == "stop",
                 "a stop string cuts the text before it", repr(cut.choices[0].text[-40:]))
    s1, s2 = (client.completions.create(model="smollm2", prompt=PROMPTS[3], max_tokens=16,
                                        temperature=0.9, seed=5).choices[0].text
              for _ in range(2))
    checks.check(s1 == s2, "sampling with a seed repeats", repr(s1[:40]))
    for kwargs, what in (({"max_tokens": 100000}, "max_tokens past the context"),
                         ({"n": 2}, "n = 2")):
        try:
            client.completions.create(model="smollm2", prompt="Hi", **kwargs)
            checks.check(False, f"{what}: 400")
        except openai.BadRequestError as e:
            # The client hands over the body's "error" object.
            checks.check(e.status_code == 400 and isinstance(e.body, dict) and "message" in e.body,
                         f"{what}: 400 with an error body", str(e)[:120])
    status, body = srv.post("/v1/completions", b"{not json")
    checks.check(status == 400 and "not valid JSON" in body, "a body that is not JSON: 400", body[:100])
    status, _ = srv.get("/v1/nothing")
    checks.check(status == 404, "an unknown path: 404", str(status))


def concurrency_checks(checks, srv, client, art):
    n = 20

    def one(p):
        return client.completions.create(model="smollm2", prompt=p, max_tokens=n,
                                         temperature=0).choices[0].text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, PROMPTS))
    peak = srv.metric("llmc_batch_size_max")
    same = sum(g == run_alone(art, p, n) for g, p in zip(got, PROMPTS))
    checks.check(same == 16, "16 concurrent completions each equal `llmc run` alone",
                 f"{same} of 16; batch size max {peak}")
    checks.check(peak is not None and peak > 1, "concurrent requests shared forward steps",
                 f"llmc_batch_size_max {peak}")


SYSTEM = ("You are a careful assistant for a compiler team. Answer in one short sentence, "
          "name the exact flag or file when there is one, never invent options, and say so "
          "plainly when you do not know. The project builds with CMake and Ninja, keeps its "
          "passes under passes/, its kernels under codegen/, and its runtime under runtime/.")


def prefix_sharing_checks(checks, srv, client, art):
    """Chat requests with one long system prompt, one after another: the
    later ones take the first one's KV blocks for the shared prefix (the
    prefix-cache counter grows by whole blocks) and still answer exactly as
    `llmc run --chat --system` alone; afterwards no sequence holds a block."""
    n = 16
    before = srv.metric("llmc_prefix_cache_hit_tokens_total") or 0
    same = 0
    questions = ["Where do the passes live?", "Which build tool is used?", "What is Ninja?"]
    for q in questions:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
        got = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=n,
                                             temperature=0).choices[0].message.content
        same += got == run_alone(art, q, n, chat=True, system=SYSTEM)
    hits = (srv.metric("llmc_prefix_cache_hit_tokens_total") or 0) - before
    block = srv.metric("llmc_kv_block_bytes")
    checks.check(same == len(questions), "chats sharing a system prompt equal `llmc run` alone",
                 f"{same} of {len(questions)}")
    checks.check(hits >= 2 * 64 and hits % 16 == 0,
                 "later chats take the shared system prompt's KV blocks (prefix cache)",
                 f"{hits:.0f} prompt tokens from shared blocks; block {block} bytes")
    checks.check(srv.metric("llmc_kv_pool_blocks_used") == 0 and
                 (srv.metric("llmc_kv_pool_blocks_cached") or 0) > 0,
                 "finished sequences gave their blocks back (the prefix cache keeps its own)",
                 f"used {srv.metric('llmc_kv_pool_blocks_used')}, "
                 f"cached {srv.metric('llmc_kv_pool_blocks_cached')}")


def disconnect_and_shutdown_checks(checks, srv, art, openai):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": PROMPTS[1], "max_tokens": 3000, "temperature": 0, "stream": True}),
        {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = resp.readline()
    conn.close()  # the client goes away mid-stream
    freed = False
    for _ in range(100):
        time.sleep(0.1)
        if srv.metric("llmc_running_sequences") == 0:
            freed = True
            break
    checks.check(first.startswith(b"data:") and freed,
                 "a disconnected stream frees its sequence", f"first line {first[:40]!r}")
    # A non-streamed request: the handler waits for the whole text, and
    # must still see its client go away (within 2 s; 3000 tokens take ~15 s).
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": PROMPTS[2], "max_tokens": 3000, "temperature": 0}),
        {"Content-Type": "application/json"})
    running = False
    for _ in range(100):
        if srv.metric("llmc_running_sequences") == 1:
            running = True
            break
        time.sleep(0.05)
    conn.close()  # the client goes away before any answer
    closed_at, freed_s = time.time(), None
    while time.time() - closed_at < 10:
        if srv.metric("llmc_running_sequences") == 0:
            freed_s = time.time() - closed_at
            break
        time.sleep(0.05)
    checks.check(running and freed_s is not None and freed_s < 2.0,
                 "a disconnected non-streamed request frees its sequence",
                 f"running {running}, freed after {freed_s} s")
    result = {}

    def long_request():
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        result["text"] = c.completions.create(model="smollm2", prompt=PROMPTS[4],
                                              max_tokens=48, temperature=0).choices[0].text

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)
    code = srv.stop()
    t.join(timeout=60)
    checks.check(code == 0 and "SIGTERM" in "".join(srv.log), "SIGTERM: exit 0 after draining",
                 f"exit {code}")
    checks.check(result.get("text") == run_alone(art, PROMPTS[4], 48),
                 "the request running at SIGTERM completed", repr(result.get("text", "")[:40]))


def queue_checks(checks, art, openai):
    srv = Served(art, "--max-batch", "1", "--max-queue", "1", "--step-tokens", "64", "-q")
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)

    def one(_):
        try:
            client.completions.create(model="smollm2", prompt="Tell me a story.",
                                      max_tokens=64, temperature=0)
            return 200
        except openai.RateLimitError:
            return 429

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        codes = list(pool.map(one, range(5)))
    checks.check(429 in codes and 200 in codes, "a full queue answers 429", str(codes))
    srv.stop()


def main():
    checks = harness.Checks("llmc serve: the OpenAI API with continuous batching")
    if not os.path.exists(harness.SMOLLM2_GGUF):
        harness.skip(f"{harness.SMOLLM2_GGUF} missing (scripts/setup.sh fetches it)")
    try:
        import openai
    except ImportError:
        harness.skip("the openai package is missing from the fixture venv (scripts/setup.sh)")
    work = harness.work_dir("serve_openai")
    art = os.path.join(work, "smollm2.llmc")
    harness.compile_checked(checks, harness.SMOLLM2_GGUF, art, "", "compile SmolLM2")
    srv = Served(art, "--max-batch", "16", "-q")
    checks.check(srv.port is not None, "the server says where it listens", "".join(srv.log)[-200:])
    if srv.port is None:
        srv.stop()
        checks.finish()
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
    try:
        api_checks(checks, srv, client, art, openai)
        concurrency_checks(checks, srv, client, art)
        prefix_sharing_checks(checks, srv, client, art)
        disconnect_and_shutdown_checks(checks, srv, art, openai)
        queue_checks(checks, art, openai)
    finally:
        srv.stop()
    checks.finish()


if __name__ == "__main__":
    main()
