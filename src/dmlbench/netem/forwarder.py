"""Latency without netem: a user-space forwarder between TUN devices.

Each worker namespace gets a TUN device (``dmlbt``); routes send traffic for the other
workers into it. This process holds every device's file descriptor, reads each IPv4
packet, keeps it for the configured one-way delay, and writes it into the TUN device
of the destination worker's namespace. A constant delay keeps packets in order, so a
FIFO queue suffices. Bandwidth is still shaped by ``tbf`` on each TUN device.

Run by :class:`dmlbench.netem.topology.Topology`, never by hand::

    python -m dmlbench.netem.forwarder --delay-us 5000 NS0=10.x.0.1 NS1=...

It prints ``ready`` once every device exists, exits on SIGTERM or when its parent
dies, and then prints its own cost (CPU seconds, packets, bytes, how late packets
left) as one JSON line: the numbers that say whether it disturbed compute timings.
They travel on the pipe the launcher reads, so a launcher that was killed leaves no
file behind.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from dmlbench.netem.namespaces import TUN_DEVICE, enter_namespace, set_namespace

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_PACKET = 65536


def open_tun(namespace: str, home: int) -> int:
    """Create and open TUN device ``dmlbt`` inside ``namespace``; come back to ``home``."""
    enter_namespace(namespace)
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", TUN_DEVICE.encode(), IFF_TUN | IFF_NO_PI))
        return fd
    finally:
        set_namespace(home, "the launcher's namespace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay-us", type=float, required=True)
    parser.add_argument("endpoints", nargs="+", help="NAMESPACE=IPv4 of each worker")
    args = parser.parse_args(argv)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    by_address: dict[bytes, int] = {}
    fds = []
    for endpoint in args.endpoints:
        namespace, _, address = endpoint.partition("=")
        fd = open_tun(namespace, home)
        fds.append(fd)
        by_address[socket.inet_aton(address)] = fd
    parent = os.getppid()
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when we stop
    sys.stdout.write("ready\n")  # the launcher waits for this line: the devices are up
    sys.stdout.flush()
    delay = args.delay_us / 1e6
    queue: collections.deque[tuple[float, int, bytes]] = collections.deque()
    packets = dropped = sent_bytes = 0
    late_max = late_sum = 0.0
    while not stop and os.getppid() == parent:
        timeout = 0.05
        if queue:
            timeout = max(0.0, queue[0][0] - time.perf_counter())
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            continue
        now = time.perf_counter()
        for fd in readable:
            while True:
                try:
                    packet = os.read(fd, MAX_PACKET)
                except BlockingIOError:
                    break
                target = by_address.get(packet[16:20]) if len(packet) >= 20 else None
                if target is None or packet[0] >> 4 != 4:
                    dropped += 1  # not IPv4 to a worker (e.g. router solicitations)
                    continue
                queue.append((now + delay, target, packet))
        now = time.perf_counter()
        while queue and queue[0][0] <= now:
            due, target, packet = queue.popleft()
            try:
                os.write(target, packet)
            except OSError:
                dropped += 1
                continue
            late = now - due
            late_max, late_sum = max(late_max, late), late_sum + late
            packets += 1
            sent_bytes += len(packet)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats = {
        "delay_s": delay,
        "packets": packets,
        "bytes": sent_bytes,
        "dropped": dropped,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "late_mean_s": late_sum / packets if packets else 0.0,
        "late_max_s": late_max,
    }
    try:
        sys.stdout.write(json.dumps(stats) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the launcher is gone: nobody to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
