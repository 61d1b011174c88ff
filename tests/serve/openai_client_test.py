#!/usr/bin/env python3
"""`onepass serve` on the real default model, driven by the official `openai` client and by
raw HTTP: completions and chat (plain and streamed), stop strings, errors as 400 with a JSON
body while the server keeps serving, 503 + Retry-After when the queue is full, a client that
disconnects cancels its request, /health, /metrics, /v1/models, and SIGTERM drains and exits 0.
With --parallel 4 (continuous batching): a repeated long prompt takes its KV blocks from the
prefix cache and answers the same; 16 concurrent clients all complete, and a greedy
request gets the same text alone and in a full batch.

  openai_client_test.py ONEPASS_BINARY MODEL.gguf
Exits 77 (skipped) when the openai package or the model is missing.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

SKIP = 77
BINARY = MODEL = None


def start_server(*extra):
    proc = subprocess.Popen(
        [BINARY, "serve", "-m", MODEL, "--backend", "cpu", "--port", "0", "-c", "512", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    lines = []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [lines.append(l) for l in proc.stderr], daemon=True).start()
            return proc, int(m.group(1)), lines
    proc.kill()
    raise RuntimeError("server did not start:\n" + "".join(lines))


def raw(port, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), payload


def metric(port, name):
    _, _, text = raw(port, "GET", "/metrics")
    m = re.search(r"^onepass_%s (\S+)$" % name, text.decode(), re.M)
    return float(m.group(1))


class Serve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai
        cls.proc, cls.port, cls.log = start_server("--queue", "1")
        cls.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % cls.port, api_key="unused",
                                   max_retries=0, timeout=120)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        if cls.proc.poll() is None:
            cls.proc.kill()
            cls.proc.wait()

    def test_models_health_metrics(self):
        models = self.client.models.list().data
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0].id, "SmolLM2-135M-Instruct.Q4_1")
        status, _, body = raw(self.port, "GET", "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        _, headers, text = raw(self.port, "GET", "/metrics")
        text = text.decode()
        for name in ["requests_total", "prompt_tokens_total", "completion_tokens_total", "queue_depth",
                     "running_requests", "kv_tokens_used", "kv_tokens_capacity"]:
            self.assertRegex(text, r"# TYPE onepass_%s (counter|gauge)\nonepass_%s \d+" % (name, name))
        self.assertEqual(metric(self.port, "kv_tokens_capacity"), 512)

    def test_completion_matches_the_cli_and_its_stream(self):
        prompt = "The capital of France is"
        r = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=12, temperature=0)
        text = r.choices[0].text
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertGreater(r.usage.prompt_tokens, 3)
        cli = subprocess.run([BINARY, "generate", "-m", MODEL, "--backend", "cpu", "-p", prompt, "-n", "12"],
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual(text, cli.rstrip("\n"))
        self.assertIn("Paris", text)
        pieces = [c.choices[0].text for c in self.client.completions.create(
            model=self.model, prompt=prompt, max_tokens=12, temperature=0, stream=True)]
        self.assertGreater(len(pieces), 3)
        self.assertEqual("".join(pieces), text)

    def test_chat_and_chat_stream(self):
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        r = self.client.chat.completions.create(model=self.model, messages=messages, max_tokens=30, temperature=0)
        answer = r.choices[0].message.content
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn("Paris", answer)
        self.assertEqual(r.choices[0].finish_reason, "stop")  # the model ends its turn
        stream = self.client.chat.completions.create(model=self.model, messages=messages, max_tokens=30,
                                                     temperature=0, stream=True)
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), answer)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")

    def test_stop_strings_and_seeded_sampling(self):
        r = self.client.completions.create(model=self.model, prompt="Paris is a city in France. It is",
                                           max_tokens=40, temperature=0, stop=["."])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertNotIn(".", r.choices[0].text)
        a = self.client.completions.create(model=self.model, prompt="Once upon a time", max_tokens=16,
                                           temperature=0.9, seed=5).choices[0].text
        b = self.client.completions.create(model=self.model, prompt="Once upon a time", max_tokens=16,
                                           temperature=0.9, seed=5).choices[0].text
        self.assertEqual(a, b)
        # A repetition penalty (llama-server's extension) changes a greedy loop.
        loop = "I'm a cat. I'm a cat. I'm a cat. I'm a cat."
        plain = self.client.completions.create(model=self.model, prompt=loop, max_tokens=24, temperature=0)
        penalised = self.client.completions.create(model=self.model, prompt=loop, max_tokens=24, temperature=0,
                                                   extra_body={"repeat_penalty": 1.5, "min_p": 0.05})
        self.assertGreaterEqual(plain.choices[0].text.count("cat"), 3)
        self.assertNotEqual(penalised.choices[0].text, plain.choices[0].text)

    def test_bad_requests_get_400_and_the_server_keeps_serving(self):
        import openai
        cases = [b"{not json", b"[1, 2]", json.dumps({"prompt": 5}).encode(),
                 json.dumps({"prompt": "hi", "n": 2}).encode(),
                 json.dumps({"prompt": "hi", "temperature": -1}).encode(),
                 json.dumps({"prompt": "hi", "max_tokens": "many"}).encode(),
                 json.dumps({"prompt": "hi", "min_p": 2}).encode(),
                 json.dumps({"prompt": "hi", "repeat_penalty": 0}).encode(),
                 json.dumps({"prompt": [1, 2, 99999999]}).encode(),
                 json.dumps({"prompt": "word " * 1000}).encode()]
        for body in cases:
            status, _, payload = raw(self.port, "POST", "/v1/completions", body)
            self.assertEqual(status, 400, body[:60])
            error = json.loads(payload)["error"]
            self.assertTrue(error["message"])
            self.assertEqual(error["type"], "invalid_request_error")
        status, _, payload = raw(self.port, "POST", "/v1/chat/completions", {"messages": "hello"})
        self.assertEqual(status, 400)
        self.assertIn("messages", json.loads(payload)["error"]["message"])
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=self.model, prompt="hi", top_p=3)
        status, _, _ = raw(self.port, "GET", "/no/such/path")
        self.assertEqual(status, 404)
        r = self.client.completions.create(model=self.model, prompt="Hello", max_tokens=4, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 4)

    def test_full_queue_503_and_disconnect_cancels(self):
        cancelled_before = metric(self.port, "requests_cancelled_total")
        # A long streamed request holds the model; read its first event, then queue one more
        # (the queue holds 1): a third is refused with 503 and Retry-After.
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": True}),
            headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        first = resp.readline()
        while not first.startswith(b"data: "):
            first = resp.readline()
        queued_result = {}
        queued = threading.Thread(target=lambda: queued_result.update(zip(
            ("status", "headers", "body"),
            raw(self.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "temperature": 0}))))
        queued.start()
        deadline = time.time() + 30
        while metric(self.port, "queue_depth") < 1 and time.time() < deadline:
            time.sleep(0.02)
        status, headers, payload = raw(self.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3})
        self.assertEqual(status, 503)
        self.assertEqual(headers.get("Retry-After"), "1")
        self.assertEqual(json.loads(payload)["error"]["type"], "server_busy")
        # The first client goes away mid-stream: its request is cancelled and the queued
        # one runs.
        conn.sock.shutdown(2)
        conn.close()
        queued.join(60)
        self.assertEqual(queued_result.get("status"), 200)
        deadline = time.time() + 30
        while metric(self.port, "requests_cancelled_total") <= cancelled_before and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(metric(self.port, "requests_cancelled_total"), cancelled_before + 1)
        self.assertLess(metric(self.port, "completion_tokens_total"), 10000)

    def test_zz_sigterm_drains_and_exits(self):
        # A request in flight when SIGTERM arrives still gets its answer.
        result = {}
        t = threading.Thread(target=lambda: result.update(zip(
            ("status", "headers", "body"),
            raw(self.port, "POST", "/v1/completions", {"prompt": "Once", "max_tokens": 24, "temperature": 0}))))
        t.start()
        deadline = time.time() + 30
        while metric(self.port, "running_requests") < 1 and time.time() < deadline:
            time.sleep(0.01)
        self.proc.send_signal(signal.SIGTERM)
        t.join(60)
        self.assertEqual(result.get("status"), 200)
        self.assertEqual(json.loads(result["body"])["usage"]["completion_tokens"], 24)
        self.assertEqual(self.proc.wait(timeout=30), 0)


class ServeParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai
        cls.proc, cls.port, cls.log = start_server("--parallel", "4")
        cls.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % cls.port, api_key="unused",
                                   max_retries=0, timeout=300)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        if cls.proc.poll() is None:
            cls.proc.send_signal(signal.SIGTERM)
            cls.proc.wait(timeout=60)

    def complete(self, prompt, stream=False):
        r = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=16, temperature=0,
                                           stream=stream)
        return "".join(c.choices[0].text for c in r) if stream else r.choices[0].text

    def test_a_repeated_long_prompt_shares_its_cached_blocks(self):
        prompt = "Fruits: " + ", ".join(["apple", "banana", "cherry", "grape", "melon"] * 12) + ". The first fruit is"
        first = self.complete(prompt)
        cached = metric(self.port, "prompt_tokens_cached_total")
        self.assertGreater(metric(self.port, "kv_blocks_cached"), 0)
        second = self.complete(prompt)
        self.assertEqual(second, first)
        # All full blocks of 16 before the prompt's last token come from the cache.
        self.assertGreaterEqual(metric(self.port, "prompt_tokens_cached_total") - cached, 48)

    def test_sixteen_concurrent_clients_and_the_same_greedy_text_alone_and_batched(self):
        prompt = "The capital of France is"
        alone = self.complete(prompt)
        self.assertIn("Paris", alone)
        prompts = [prompt if i % 4 == 0 else "Question %d: name a colour. Answer:" % i for i in range(16)]
        results = [None] * 16

        def run(i):
            try:
                results[i] = self.complete(prompts[i], stream=i % 2 == 1)
            except Exception as e:  # noqa: BLE001 - reported below
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        deadline = time.time() + 30
        running = 0
        while time.time() < deadline and running < 2:
            running = metric(self.port, "running_requests")
            time.sleep(0.02)
        self.assertGreaterEqual(running, 2)  # requests did run together
        self.assertEqual(raw(self.port, "GET", "/health")[0], 200)
        for t in threads:
            t.join(300)
        for i, r in enumerate(results):
            self.assertIsInstance(r, str, "request %d: %r" % (i, r))
        for i in range(0, 16, 4):
            self.assertEqual(results[i], alone, "request %d in the batch" % i)
        self.assertEqual(metric(self.port, "kv_blocks_used"), 0)
        self.assertGreater(metric(self.port, "kv_blocks_total"), 0)


def main():
    global BINARY, MODEL
    BINARY, MODEL = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    try:
        import openai  # noqa: F401
    except ImportError:
        print("skipped: the openai package is not installed (scripts/setup installs it)")
        return SKIP
    if not os.path.exists(MODEL):
        print("skipped: %s is not installed (scripts/setup)" % MODEL)
        return SKIP
    prog = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
