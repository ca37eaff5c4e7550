#!/usr/bin/env python3
"""A small HTTP/1.1 load generator (standard library only; the machine has no ab or wrk, and
the project adds no dependency for a benchmark): CONCURRENCY keep-alive connections, spread
over PROCESSES processes with one asyncio loop each, send the same GET back to back for
DURATION seconds.

usage: http_load.py URL [-c 64] [-d 10] [-p 2] [-H 'Name: value' ...]
Prints one JSON line: {"requests", "seconds", "rps", "non_200", "errors", "p50_ms", "p99_ms"}.
The client shares the machine's cores with the server: on a small machine it is part of what
is measured (say so next to the numbers).
"""
import argparse
import asyncio
import json
import multiprocessing
import time
import urllib.parse


async def connection(host, port, request, deadline, out):
    reader = writer = None
    while time.monotonic() < deadline:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            t0 = time.monotonic()
            writer.write(request)
            status_line = await reader.readline()
            if not status_line:
                raise ConnectionError("closed")
            status = int(status_line.split()[1])
            length, close = 0, False
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection" and "close" in value.lower():
                    close = True
            if length:
                await reader.readexactly(length)
            out["lat"].append(time.monotonic() - t0)
            out["requests"] += 1
            if status != 200:
                out["non_200"] += 1
            if close:
                writer.close()
                writer = None
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
            out["errors"] += 1
            if writer is not None:
                writer.close()
            writer = None
            await asyncio.sleep(0.01)
    if writer is not None:
        writer.close()


def worker(args):
    url, headers, conns, duration, start_at, queue = args
    u = urllib.parse.urlsplit(url)
    path = u.path + ("?" + u.query if u.query else "")
    req = f"GET {path} HTTP/1.1\r\nHost: {u.netloc}\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
    out = {"requests": 0, "non_200": 0, "errors": 0, "lat": []}

    async def main():
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        deadline = time.monotonic() + duration
        await asyncio.gather(*(connection(u.hostname, u.port or 80, req.encode(), deadline, out)
                               for _ in range(conns)))

    asyncio.run(main())
    queue.put(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-c", "--concurrency", type=int, default=64)
    ap.add_argument("-d", "--duration", type=float, default=10)
    ap.add_argument("-p", "--processes", type=int, default=2)
    ap.add_argument("-H", "--header", action="append", default=[])
    a = ap.parse_args()
    queue = multiprocessing.Queue()
    start_at = time.time() + 0.5
    per = [a.concurrency // a.processes + (1 if i < a.concurrency % a.processes else 0)
           for i in range(a.processes)]
    procs = [multiprocessing.Process(target=worker,
                                     args=((a.url, a.header, n, a.duration, start_at, queue),))
             for n in per if n]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    lat = sorted(x for r in results for x in r["lat"])
    n = sum(r["requests"] for r in results)
    print(json.dumps({
        "requests": n, "seconds": a.duration, "rps": round(n / a.duration, 1),
        "non_200": sum(r["non_200"] for r in results), "errors": sum(r["errors"] for r in results),
        "p50_ms": round(1000 * lat[len(lat) // 2], 2) if lat else None,
        "p99_ms": round(1000 * lat[int(len(lat) * 0.99)], 2) if lat else None}))


if __name__ == "__main__":
    main()
