"""TLS checks with Python's clients, run by tests/tls.rs against a server
started with --tls-cert and --tls-key. Each mode prints what it found;
the Rust test asserts it.

Usage:
  tls_check.py psycopg PG_PORT CA_PEM    prints "ok" (asserts ssl_in_use)
  tls_check.py https HTTP_PORT CA_PEM    prints "ok" (urllib over https)
  tls_check.py serial PORT CA_PEM http|pg
      prints the serial number (hex) of the certificate a new handshake
      gets; on the PostgreSQL port the handshake is direct TLS (ALPN
      "postgresql", as PostgreSQL 17's sslnegotiation=direct) and a query
      then runs over it
  tls_check.py hold PG_PORT CA_PEM
      connects (verify-full), prints "ready", waits for a line on stdin,
      then prints the answer to SELECT 2 over the same connection
"""
import json
import socket
import ssl
import struct
import sys
import urllib.request


def conninfo(port, ca, mode):
    return (
        f"host=localhost port={port} user=kiln dbname=kiln sslmode={mode} "
        f"sslrootcert={ca} connect_timeout=10"
    )


def check_psycopg(port, ca):
    import psycopg

    for mode in ["require", "verify-full", "prefer"]:
        with psycopg.connect(conninfo(port, ca, mode), autocommit=True) as c:
            assert c.pgconn.ssl_in_use, f"{mode}: not over TLS"
            got = c.execute("SELECT 40 + 2").fetchone()[0]
            assert got == 42, f"{mode}: {got}"
    with psycopg.connect(conninfo(port, ca, "disable"), autocommit=True) as c:
        assert not c.pgconn.ssl_in_use, "disable: over TLS"
    print("ok")


def check_https(port, ca):
    context = ssl.create_default_context(cafile=ca)
    req = urllib.request.Request(
        f"https://localhost:{port}/v1/sql",
        data=json.dumps({"sql": "SELECT 40 + 2 AS x"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, context=context, timeout=10) as r:
        body = json.load(r)
    assert body["rows"] == [[42]], body
    # The same port and CA, but a name the certificate does not carry.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            context.wrap_socket(raw, server_hostname="elsewhere.test")
        raise AssertionError("a certificate for another name was accepted")
    except ssl.SSLCertVerificationError:
        pass
    print("ok")


def message(kind, body):
    return kind + struct.pack("!I", len(body) + 4) + body


def serial(port, ca, door):
    context = ssl.create_default_context(cafile=ca)
    if door == "pg":
        context.set_alpn_protocols(["postgresql"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as s:
            number = s.getpeercert()["serialNumber"]
            if door == "pg":
                params = b"user\0kiln\0database\0kiln\0\0"
                s.sendall(struct.pack("!II", len(params) + 8, 196608) + params)
                seen = b""
                while b"Z\0\0\0\x05" not in seen:
                    chunk = s.recv(4096)
                    assert chunk, f"closed after startup: {seen!r}"
                    seen += chunk
                s.sendall(message(b"Q", b"SELECT 'direct' || 'tls'\0"))
                seen = b""
                while b"Z\0\0\0\x05" not in seen:
                    seen += s.recv(4096)
                assert b"directtls" in seen, seen
    print(number)


def hold(port, ca):
    import psycopg

    with psycopg.connect(conninfo(port, ca, "verify-full"), autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone()[0] == 1
        print("ready", flush=True)
        sys.stdin.readline()
        print(c.execute("SELECT 2").fetchone()[0], flush=True)


if __name__ == "__main__":
    mode, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "psycopg":
        check_psycopg(port, ca)
    elif mode == "https":
        check_https(port, ca)
    elif mode == "serial":
        serial(port, ca, sys.argv[4])
    elif mode == "hold":
        hold(port, ca)
    else:
        raise SystemExit(f"unknown mode {mode}")
