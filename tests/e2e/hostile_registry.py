"""A registry that attacks its clients (for the node's bounded-read tests).

Usage: hostile_registry.py PORTFILE
Serves on 127.0.0.1 (free port, written to PORTFILE):
  /v2/huge/manifests/*        200 with an endless chunked body (no Content-Length)
  /v2/hugelen/manifests/*     200 announcing a 3 GiB Content-Length
  /v2/bigconfig/manifests/*   a manifest whose config claims 3 GiB
  /v2/partial/manifests/*     a manifest whose config is fine and whose layer is corrupt
"""
import hashlib
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONFIG = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
LAYER = b"the real layer bytes"
LAYER_DIGEST = "sha256:" + hashlib.sha256(LAYER).hexdigest()
MT = "application/vnd.oci.image.manifest.v1+json"


def manifest(config_size):
    return json.dumps({
        "schemaVersion": 2, "mediaType": MT,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG_DIGEST, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": LAYER_DIGEST, "size": len(LAYER)}],
    }).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        p = self.path
        try:
            if p == "/v2/" or p == "/v2":
                return self.send(200, b"{}")
            if p.startswith("/v2/huge/manifests/"):
                self.send_response(200)
                self.send_header("Content-Type", MT)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b" " * 65536
                frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
                while True:
                    self.wfile.write(frame)
            if p.startswith("/v2/hugelen/manifests/"):
                self.send_response(200)
                self.send_header("Content-Type", MT)
                self.send_header("Content-Length", str(3 << 30))
                self.end_headers()
                while True:
                    self.wfile.write(b" " * 65536)
            if p.startswith("/v2/bigconfig/manifests/"):
                return self.send(200, manifest(3 << 30), MT)
            if p.startswith("/v2/partial/manifests/"):
                return self.send(200, manifest(len(CONFIG)), MT)
            if p.endswith("/blobs/" + CONFIG_DIGEST):
                return self.send(200, CONFIG, "application/octet-stream")
            if p.endswith("/blobs/" + LAYER_DIGEST):
                return self.send(200, b"X" * len(LAYER), "application/octet-stream")
            return self.send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}')
        except (BrokenPipeError, ConnectionResetError):
            pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
