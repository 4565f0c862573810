#!/usr/bin/env python3
"""A small Hugging Face Hub-compatible server for tests, on 127.0.0.1 only.

It serves repositories assembled from local folders in the Hub's URL scheme:
  HEAD/GET /<org>/<name>/resolve/<revision>/<file>
    small files: 200 with ETag = git blob sha1, X-Repo-Commit, the body for GET
    LFS files (.safetensors, .gguf): 302 to the second listener (a "CDN" on another port, as the Hub's CDN is on
    another host) with X-Linked-Etag = sha256, X-Linked-Size, X-Repo-Commit
  GET /blob/<org>/<name>/<sha256> on the CDN port: the bytes, with Range support (206, Content-Range)
  GET /api/models/<org>/<name>/revision/<revision>: {"sha": commit, "siblings": [{"rfilename": file}, ...]}
Errors carry X-Error-Code as the Hub's do: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo.

Options: --repo ORG/NAME=DIR[:DIR...] (files of the folders merged), --gated ORG/NAME (needs
"Authorization: Bearer <--token>"), --corrupt ORG/NAME (its blobs served with one byte changed), --cut-after N
--cut ORG/NAME=N (the first whole GET of one of its
blobs stops after N bytes), --claim-size ORG/NAME=N (its LFS files claim to be N bytes), --log FILE (one JSON line per request: port, method, path, range,
bytes sent, whether an Authorization header came). Writes "HUB_PORT CDN_PORT" to --ports-file when listening.
"""
import argparse
import hashlib
import http.server
import json
import os
import re
import threading
import urllib.parse

LFS_SUFFIXES = (".safetensors", ".gguf")


class Repo:
    def __init__(self, name, dirs):
        self.name = name
        self.files = {}  # file -> path
        for d in dirs:
            for f in sorted(os.listdir(d)):
                p = os.path.join(d, f)
                if os.path.isfile(p):
                    self.files[f] = p
        self.meta = {}
        for f, p in self.files.items():
            data = open(p, "rb").read()
            if f.endswith(LFS_SUFFIXES):
                self.meta[f] = ("lfs", hashlib.sha256(data).hexdigest(), len(data))
            else:
                blob = b"blob %d\0" % len(data) + data
                self.meta[f] = ("git", hashlib.sha1(blob).hexdigest(), len(data))
        listing = "".join("%s %s\n" % (f, self.meta[f][1]) for f in sorted(self.files))
        self.commit = hashlib.sha1((name + "\n" + listing).encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", action="append", default=[])
    ap.add_argument("--gated", action="append", default=[])
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--token", default="")
    ap.add_argument("--cut", default="")
    ap.add_argument("--claim-size", action="append", default=[])
    ap.add_argument("--log", default="")
    ap.add_argument("--ports-file", required=True)
    args = ap.parse_args()

    repos = {}
    for spec in args.repo:
        name, dirs = spec.split("=", 1)
        repos[name] = Repo(name, dirs.split(":"))
    blobs = {}  # (repo name, sha256) -> path
    for r in repos.values():
        for f, (kind, etag, size) in r.meta.items():
            if kind == "lfs":
                blobs[(r.name, etag)] = r.files[f]
    cut_repo, cut_after = (args.cut.split("=")[0], int(args.cut.split("=")[1])) if args.cut else ("", 0)
    lock = threading.Lock()
    state = {"cut_done": False}
    ports = {}

    def log(entry):
        if args.log:
            with lock, open(args.log, "a") as out:
                out.write(json.dumps(entry) + "\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, headers, body=b"", send_body=True, code=None):
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            for k, v in headers.items():
                self.send_header(k, v)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            sent = 0
            if send_body and body:
                self.wfile.write(body)
                sent = len(body)
            log({"port": self.server.server_port, "method": self.command, "path": self.path,
                 "range": self.headers.get("Range"), "status": status, "sent": sent,
                 "auth": self.headers.get("Authorization") is not None})

        def do_HEAD(self):
            self.route(send_body=False)

        def do_GET(self):
            self.route(send_body=True)

        def route(self, send_body):
            path = urllib.parse.urlsplit(self.path).path
            if self.server.server_port == ports["cdn"]:
                return self.cdn(path, send_body)
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
            if m:
                return self.listing(m.group(1), urllib.parse.unquote(m.group(2)), send_body)
            m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if not m:
                return self.reply(404, {}, b"not found", send_body, "RepoNotFound")
            name, rev, f = m.group(1), urllib.parse.unquote(m.group(2)), urllib.parse.unquote(m.group(3))
            repo = self.repo_at(name, rev, send_body)
            if repo is None:
                return None
            if f not in repo.files:
                return self.reply(404, {"X-Repo-Commit": repo.commit}, b"Entry not found", send_body, "EntryNotFound")
            kind, etag, size = repo.meta[f]
            common = {"X-Repo-Commit": repo.commit, "ETag": '"%s"' % etag}
            if kind == "lfs":
                location = "http://127.0.0.1:%d/blob/%s/%s" % (ports["cdn"], name, etag)
                claimed = dict(c.split("=") for c in args.claim_size).get(name, size)
                return self.reply(302, dict(common, **{"Location": location, "X-Linked-Etag": '"%s"' % etag,
                                                       "X-Linked-Size": str(claimed)}), b"", send_body)
            return self.reply(200, common, open(repo.files[f], "rb").read(), send_body)

        def repo_at(self, name, rev, send_body):
            """The repository `name` at `rev`, or None once the Hub's refusal is sent (no such repository, gated
            without the token, no such revision)."""
            repo = repos.get(name)
            if repo is None:
                self.reply(404, {}, b"Repository not found", send_body, "RepoNotFound")
            elif name in args.gated and self.headers.get("Authorization") != "Bearer " + args.token:
                self.reply(401, {}, b"Access to this model is restricted", send_body, "GatedRepo")
            elif rev not in ("main", repo.commit):
                self.reply(404, {}, b"Invalid rev id", send_body, "RevisionNotFound")
            else:
                return repo
            return None

        def listing(self, name, rev, send_body):
            repo = self.repo_at(name, rev, send_body)
            if repo is None:
                return None
            body = json.dumps({"sha": repo.commit, "siblings": [{"rfilename": f} for f in sorted(repo.files)]})
            return self.reply(200, {"Content-Type": "application/json"}, body.encode(), send_body)

        def cdn(self, path, send_body):
            m = re.fullmatch(r"/blob/([^/]+/[^/]+)/([0-9a-f]{64})", path)
            if not m or (m.group(1), m.group(2)) not in blobs:
                return self.reply(404, {}, b"no such blob", send_body)
            repo = m.group(1)
            file_path = blobs[(repo, m.group(2))]
            data = open(file_path, "rb").read()
            if repo in args.corrupt:
                data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
                begin = int(m.group(1))
                end = int(m.group(2)) + 1 if m.group(2) else len(data)
                if begin >= len(data) or end > len(data) or begin >= end:
                    return self.reply(416, {"Content-Range": "bytes */%d" % len(data)}, b"", send_body)
                headers = {"Content-Range": "bytes %d-%d/%d" % (begin, end - 1, len(data))}
                return self.reply(206, headers, data[begin:end], send_body)
            with lock:
                cut = repo == cut_repo and not state["cut_done"]
                state["cut_done"] = state["cut_done"] or bool(cut)
            if cut:  # announce the whole file, send part of it, drop the connection
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:cut_after])
                self.wfile.flush()
                log({"port": self.server.server_port, "method": "GET", "path": self.path, "range": None,
                     "status": 200, "sent": cut_after, "auth": False, "cut": True})
                self.close_connection = True
                return
            return self.reply(200, {}, data, send_body)

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cdn = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ports["hub"], ports["cdn"] = hub.server_port, cdn.server_port
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    with open(args.ports_file + ".tmp", "w") as out:
        out.write("%d %d\n" % (ports["hub"], ports["cdn"]))
    os.rename(args.ports_file + ".tmp", args.ports_file)
    hub.serve_forever()


if __name__ == "__main__":
    main()
