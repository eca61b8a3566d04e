"""The tests' in-process server (tests/server.py) answers on sockets with Nagle's algorithm
off, as `inferd serve` does: with it on, every response after the first on a keep-alive
connection waited for the client's delayed ACK (~40 ms), which slowed every test and made the
tabular benchmark's one-row figure 44 ms instead of ~1 ms."""

import socket

import httpx

from tests.server import serve


def test_accepted_connections_have_tcp_nodelay():
    with serve() as s, httpx.Client(base_url=s.url) as c:
        for _ in range(3):  # the same keep-alive connection answers each
            assert c.get("/health").status_code == 200
        conns = list(s.server.server_state.connections)
        assert len(conns) == 1
        sock = conns[0].transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
