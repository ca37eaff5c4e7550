#!/usr/bin/env python3
"""A loopback TCP proxy that cuts or stalls connections, for bench/pull_resilience.sh.

    fault_proxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT [--cut-after N] [--cuts K]
                   [--stall-after N] [--stall-seconds S] [--stats FILE]

Forwards every connection accepted on 127.0.0.1:LISTEN_PORT to the target. With --cut-after N,
a connection is closed (both ways, mid-response) once N bytes have gone downstream (server to
client) on it, for the first K such connections (--cuts, default unlimited); later ones pass
through. With --stall-after N, a connection stops forwarding downstream for S seconds after N
bytes. The bytes sent downstream in all are written as JSON to --stats on every connection close
and at exit ({"down": bytes, "up": bytes, "connections": n, "cuts": n}). Loopback only.
"""
import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

lock = threading.Lock()
stats = {"down": 0, "up": 0, "connections": 0, "cuts": 0}


def write_stats(path):
    if not path:
        return
    with lock:
        text = json.dumps(stats)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def pump(src, dst, key, limit, stall_after, stall_seconds, on_cut):
    sent = 0
    stalled = False
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if limit is not None and sent + len(data) >= limit:
                data = data[: max(0, limit - sent)]
                if data:
                    dst.sendall(data)
                    with lock:
                        stats[key] += len(data)
                on_cut()
                return
            dst.sendall(data)
            sent += len(data)
            with lock:
                stats[key] += len(data)
            if stall_after is not None and not stalled and sent >= stall_after:
                stalled = True
                time.sleep(stall_seconds)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def handle(client, target, args):
    try:
        upstream = socket.create_connection(target)
    except OSError:
        client.close()
        return
    with lock:
        stats["connections"] += 1
        cut_this = args.cut_after is not None and (args.cuts is None or stats["cuts"] < args.cuts)
        if cut_this:
            stats["cuts"] += 1

    def on_cut():
        pass

    limit = args.cut_after if cut_this else None
    t_up = threading.Thread(target=pump, args=(client, upstream, "up", None, None, 0, on_cut),
                            daemon=True)
    t_up.start()
    pump(upstream, client, "down", limit, args.stall_after, args.stall_seconds, on_cut)
    t_up.join(timeout=5)
    client.close()
    upstream.close()
    write_stats(args.stats)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("target")
    p.add_argument("--cut-after", type=int)
    p.add_argument("--cuts", type=int)
    p.add_argument("--stall-after", type=int)
    p.add_argument("--stall-seconds", type=float, default=0)
    p.add_argument("--stats")
    args = p.parse_args()
    host, port = args.target.rsplit(":", 1)
    target = (host, int(port))
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(64)
    print(f"proxy listening on 127.0.0.1:{srv.getsockname()[1]}", flush=True)

    def stop(*_):
        write_stats(args.stats)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    write_stats(args.stats)
    while True:
        client, _ = srv.accept()
        threading.Thread(target=handle, args=(client, target, args), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
