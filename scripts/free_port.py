#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 that nothing listens on, for a test server to bind.

The port is picked at random below the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), never inside it: a port the kernel hands out with
bind(0) is also the range it takes the source ports of outgoing connections from, so a server
started a moment later could find its port taken by some process's connection to PostgreSQL or
S3 ("Address already in use"). Below the range only another listener can take it, and this
script checks that none does right now (a listener that binds it later still can: callers that
choose the port themselves retry on "in use").
Exit codes: 0 printed a port, 1 none free after 200 tries.
"""
import random
import socket


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def main():
    high = min(ephemeral_low(), 65536)
    low = 20000 if high > 21000 else 1024
    for _ in range(200):
        port = random.randrange(low, high)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        print(port)
        return 0
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
