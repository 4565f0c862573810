"""Starts `corolla run` (a DHT node, servers and the API in one process) for the Python API tests, and stops it.

The demo model is used when it is downloaded (tools/fetch_demo_model.sh), else the tiny golden Llama of
tests/data with its byte-level test tokenizer: the tests then check the protocol, not the answers.
"""
import os
import re
import subprocess
import sys
import time

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def demo_path():
    cache = os.environ.get("COROLLA_CACHE", os.path.expanduser("~/.cache/corolla"))
    return os.path.join(cache, "demo", "SmolLM2-135M-Instruct.Q4_1.gguf")


def skip(reason):
    print("SKIPPED: " + reason)
    sys.exit(SKIP)


class CorollaRun:
    """`with CorollaRun(corolla_binary) as run:` gives run.base ("http://127.0.0.1:PORT"), run.model, run.demo."""

    def __init__(self, binary, servers=2):
        self.binary = binary
        self.demo = os.path.exists(demo_path())
        self.args = [binary, "run", "--port", "0", "--servers", str(servers)]
        if self.demo:
            self.model = "demo"
        else:
            self.args += ["--model", os.path.join(ROOT, "tests/data/models/llama"),
                          "--tokenizer", os.path.join(ROOT, "tests/data/tokenizers/bpe-tiny256")]
            self.model = None  # read from /v1/models
        self.proc = None
        self.base = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise RuntimeError("corolla run exited: " + err)
            m = re.match(r"chat page: (http://\S+)/$", line.strip())
            if m:
                self.base = m.group(1)
                break
        if not self.base:
            raise RuntimeError("corolla run printed no chat page URL within 120 s")
        if self.model is None:
            import json
            import urllib.request
            with urllib.request.urlopen(self.base + "/v1/models") as r:
                self.model = json.load(r)["data"][0]["id"]
        return self

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return False
