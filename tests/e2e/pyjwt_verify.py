"""Verify a podpass token with PyJWT against a JWKS, as a third-party relying party would.

usage: pyjwt_verify.py JWKS_FILE ISSUER AUDIENCE TOKEN
Prints the verified claims as JSON; exits 1 with the PyJWT error on failure.
"""
import json
import sys

import jwt

jwks_path, issuer, audience, token = sys.argv[1:5]
with open(jwks_path) as f:
    jwks = jwt.PyJWKSet.from_dict(json.load(f))
kid = jwt.get_unverified_header(token)["kid"]
key = next(k for k in jwks.keys if k.key_id == kid)
try:
    claims = jwt.decode(
        token,
        key=key.key,
        algorithms=[key.algorithm_name],
        audience=audience,
        issuer=issuer,
        options={"require": ["exp", "iat", "nbf", "iss", "sub", "aud", "jti"]},
    )
except jwt.PyJWTError as e:
    print(f"{type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(claims))
