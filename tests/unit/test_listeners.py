"""Nothing dmlbench starts listens beyond loopback: checked with `ss` and attacked from
another network namespace (a second host on this machine), as an outsider would."""

from __future__ import annotations

import socket

from helpers import Outsider, needs_root


@needs_root
def test_the_outsider_reaches_a_listener_on_every_interface(outsider: Outsider) -> None:
    """The control: the attack works against a socket that listens on every interface."""
    with (
        socket.create_server(("0.0.0.0", 0)) as server,
        socket.create_server(("127.0.0.1", 0)) as private,
    ):
        public_port, private_port = server.getsockname()[1], private.getsockname()[1]
        assert outsider.reachable([public_port, private_port]) == [public_port]
