"""A client that asks for a large result over the extended protocol
(Parse/Bind/Execute with no row limit, as pgjdbc, pgx and node-postgres
send it) and then reads nothing for HOLD seconds, then leaves.

Usage: python3 slow_reader.py PORT HOLD_SECONDS
Prints "waiting" once the query is sent; exits after HOLD seconds.
"""
import socket
import struct
import sys
import time


def message(kind, body):
    return kind + struct.pack("!I", len(body) + 4) + body


def main(port, hold):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    params = b"user\0kiln\0database\0kiln\0\0"
    s.sendall(struct.pack("!II", len(params) + 8, 196608) + params)
    seen = b""
    while b"Z\0\0\0\x05" not in seen:  # ReadyForQuery after startup
        seen += s.recv(4096)
    sql = b"SELECT v, 'row number ' || CAST(v AS VARCHAR) FROM generate_series(1, 20000000) g(v)"
    s.sendall(
        message(b"P", b"\0" + sql + b"\0" + b"\0\0")
        + message(b"B", b"\0\0" + b"\0\0" + b"\0\0" + b"\0\0")
        + message(b"E", b"\0" + b"\0\0\0\0")
        + message(b"S", b"")
    )
    print("waiting", flush=True)
    time.sleep(hold)
    s.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
