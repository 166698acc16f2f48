"""Serve one file over HTTPS on 127.0.0.1 at an ephemeral port (prints the port first).

usage: https_jwks_server.py CERT KEY FILE
"""
import http.server
import ssl
import sys

cert, key, path = sys.argv[1:4]
with open(path, "rb") as f:
    body = f.read()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/openid/v1/jwks":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/jwk-set+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
