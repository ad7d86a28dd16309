"""Writes tests/data/hf-cache with Python's huggingface_hub, so the Rust tests can show that a
cache written by the reference client is found as-is (and without a request).

huggingface_hub's own `hf_hub_download` fetches every file from a tiny hub-compatible server on
127.0.0.1 (an ephemeral port, stopped at the end): HEAD and GET on
`/{owner}/{repo}/resolve/{revision}/{path}` with `X-Repo-Commit` and `ETag`; LFS files answer the
resolve URL with a redirect carrying `X-Linked-Etag` (their sha256) and `X-Linked-Size`, and are
served from a second path. The file contents are placeholders, not models: the hub layer never
parses them.

Run from the repository root with a Python that has huggingface_hub:
    python crates/f5-hub/tests/data/make_hf_cache.py
"""

import hashlib
import http.server
import os
import shutil
import threading
from pathlib import Path

import huggingface_hub
from huggingface_hub import hf_hub_download

OUT = Path(__file__).resolve().parent / "hf-cache"

# Placeholder bytes; the Rust test checks the resolved files hold exactly these.
REPOS = {
    "f5-test/tiny-f5": {
        "commit": "4e1a2b3c4d5e6f708192a3b4c5d6e7f809102132",
        "files": {
            "F5TTS_Tiny/model_10.safetensors": (b"tiny f5 checkpoint placeholder\n" * 8, True),
            "F5TTS_Tiny/vocab.txt": (b" \na\nb\nc\n", False),
        },
    },
    "f5-test/tiny-vocos": {
        "commit": "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432",
        "files": {
            "config.yaml": (b"feature_extractor:\n  class_path: placeholder\n", False),
            "pytorch_model.bin": (b"tiny vocos weights placeholder\n" * 4, True),
        },
    },
}


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.answer(send_body=False)

    def do_GET(self):
        self.answer(send_body=True)

    def answer(self, send_body):
        parts = self.path.split("/")
        if len(parts) >= 3 and parts[1] == "cdn":
            for repo in REPOS.values():
                for data, lfs in repo["files"].values():
                    if lfs and hashlib.sha256(data).hexdigest() == parts[2]:
                        return self.body(200, data, {}, send_body)
            return self.body(404, b"", {}, send_body)
        # /{owner}/{repo}/resolve/{revision}/{path...}
        if len(parts) < 6 or parts[3] != "resolve":
            return self.body(404, b"", {}, send_body)
        repo = REPOS.get(f"{parts[1]}/{parts[2]}")
        if repo is None:
            return self.body(404, b"", {"X-Error-Code": "RepoNotFound"}, send_body)
        path = "/".join(parts[5:])
        headers = {"X-Repo-Commit": repo["commit"]}
        if path not in repo["files"]:
            return self.body(404, b"", {**headers, "X-Error-Code": "EntryNotFound"}, send_body)
        data, lfs = repo["files"][path]
        if lfs:
            sha = hashlib.sha256(data).hexdigest()
            port = self.server.server_address[1]
            headers.update(
                {
                    "Location": f"http://localhost:{port}/cdn/{sha}",
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                    "ETag": f'"{git_blob_sha1(b"lfs pointer " + sha.encode())}"',
                }
            )
            return self.body(302, b"", headers, send_body)
        headers["ETag"] = f'"{git_blob_sha1(data)}"'
        return self.body(200, data, headers, send_body)

    def body(self, status, data, headers, send_body):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if send_body:
            self.wfile.write(data)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for repo_id, repo in REPOS.items():
            for path, (data, _) in repo["files"].items():
                local = hf_hub_download(repo_id, path, cache_dir=OUT, endpoint=endpoint)
                assert Path(local).read_bytes() == data, path
    finally:
        server.shutdown()
    # Lock files are per-machine scratch, not part of the cache's content.
    shutil.rmtree(OUT / ".locks", ignore_errors=True)
    print(f"huggingface_hub {huggingface_hub.__version__} wrote {OUT}")
    for root, dirs, files in sorted(os.walk(OUT)):
        for name in sorted(files):
            path = Path(root) / name
            link = f" -> {os.readlink(path)}" if path.is_symlink() else ""
            print(f"  {path.relative_to(OUT)}{link}")


if __name__ == "__main__":
    main()
