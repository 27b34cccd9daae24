#!/usr/bin/env python3
"""Load on a ThreadSanitizer build of `llmc-rt serve` (scripts/tsan.sh):
three rounds of 24 concurrent completions on one artifact (streaming and
not, greedy and sampled, stop strings, a disconnect mid-stream every fifth
streamed request), /metrics between rounds, then SIGTERM while requests
run. Fails (exit 1) on any ThreadSanitizer report, a server exit other than
0, or a request that neither got 200 nor was dropped by this script.

Usage: serve_load.py LLMC_RT ARTIFACT   (ARTIFACT: a model without a tokenizer
is fine: prompts are token ids below 500)
"""
import concurrent.futures
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time


def main():
    binary, art = sys.argv[1], sys.argv[2]
    p = subprocess.Popen([binary, "serve", art, "--port", "0", "--max-batch", "6",
                          "--max-queue", "32", "--step-tokens", "24", "-t", "2",
                          "--request-timeout", "300"], stderr=subprocess.PIPE, text=True)
    log, port = [], None
    for line in p.stderr:
        log.append(line)
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        print("FAIL: the server did not start:\n" + "".join(log))
        return 1
    threading.Thread(target=lambda: [log.append(l) for l in p.stderr], daemon=True).start()

    def request(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        body = {"prompt": [1 + (i * 7 + k) % 500 for k in range(5 + i % 20)],
                "max_tokens": 10 + i % 30, "temperature": 0 if i % 2 else 0.8, "seed": i,
                "stream": i % 3 == 0, "stop": ["x"]}
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if i % 5 == 0 and body["stream"]:
            r.readline()
            c.close()
            return "dropped"
        r.read()
        c.close()
        return r.status

    codes = []
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        for _ in range(3):
            codes += list(pool.map(request, range(24)))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("GET", "/metrics")
            c.getresponse().read()
    late = threading.Thread(target=lambda: [request(i) for i in range(1, 4)])
    late.start()
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    late.join()
    rc = p.wait(timeout=300)
    time.sleep(0.5)
    text = "".join(log)
    reports = text.count("WARNING: ThreadSanitizer")
    summary = {str(s): codes.count(s) for s in set(codes)}
    print(f"responses {summary}, server exit {rc}, ThreadSanitizer reports {reports}")
    if reports:
        i = text.find("WARNING: ThreadSanitizer")
        print(text[i:i + 6000])
    ok = reports == 0 and rc == 0 and all(c in (200, "dropped") for c in codes)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
