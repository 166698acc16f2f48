"""Mint a Kubernetes-layout service-account token with PyJWT from a PEM private key.

usage: pyjwt_sign.py KEY_PEM KID ALG ISSUER AUDIENCE
"""
import sys
import time
import uuid

import jwt

key_path, kid, alg, issuer, audience = sys.argv[1:6]
now = int(time.time())
claims = {
    "aud": [audience],
    "exp": now + 600,
    "iat": now,
    "iss": issuer,
    "jti": str(uuid.uuid4()),
    "kubernetes.io": {"namespace": "py", "serviceaccount": {"name": "signer", "uid": "py-uid"}},
    "nbf": now,
    "sub": "system:serviceaccount:py:signer",
}
with open(key_path, "rb") as f:
    print(jwt.encode(claims, f.read(), algorithm=alg, headers={"kid": kid}))
