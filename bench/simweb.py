"""A simulated web for ``bench.crawl_web``: many slow loopback hosts, every request recorded.

Run (``bench.crawl_web`` starts it as a process of its own, so its CPU is not counted as the
crawler's): .venv/bin/python -m bench.simweb --hosts 100 --pages 20 --latency-ms 100 --port 8200
--records FILE. It prints ``ready`` once every host listens; SIGTERM (or its parent's exit, or
``--max-seconds``) stops it, and it then writes its request records to FILE as JSON.

Host ``n`` (0-based) is ``127.0.{1 + n // 250}.{1 + n % 250}``: loopback only, one port for all. Each
serves ``/robots.txt`` (``User-agent: *`` / ``Disallow: /private/``) and the HTML pages ``/p/0`` …
``/p/{P-1}``: page ``i`` links to pages ``2i+1`` and ``2i+2`` of its host (a binary tree: every page is
reached from ``/p/0`` within ``tree_depth(P)`` hops) and to ``/private/x`` (which robots.txt forbids),
and shows two images (``/img/i-a.jpg``, ``/img/i-b.jpg``; not served: 404). Every answer is sent
``--latency-ms`` after its request arrived (HTTP/1.1 with keep-alive). A record is
``[host, path, arrival, end]``: the address the request came in on, its path, when its head had been
read and when its answer had been written (``time.monotonic()``, the machine's clock every process
shares on Linux).

This module does not import Django.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from urllib.parse import urlsplit

ROBOTS = b"User-agent: *\nDisallow: /private/\n"
MAX_HOSTS = 10_000  # 127.0.1.1 … 127.0.40.250
MAX_HEAD_BYTES = 16 * 1024


def host_addresses(hosts: int) -> list[str]:
    """The loopback addresses of ``hosts`` simulated hosts, 250 to a /24: 127.0.1.1 … 127.0.1.250, 127.0.2.1 …"""
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"hosts must be from 1 to {MAX_HOSTS}")
    return [f"127.0.{1 + n // 250}.{1 + n % 250}" for n in range(hosts)]


def tree_depth(pages: int) -> int:
    """The link hops from ``/p/0`` to the deepest page (page ``i`` is at depth ⌊log2(i + 1)⌋)."""
    return max(pages, 1).bit_length() - 1


def page(index: int, pages: int) -> bytes:
    links = "".join(
        f'<li><a href="/p/{child}">page {child}</a></li>' for child in (2 * index + 1, 2 * index + 2) if child < pages
    )
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>page {index}</title></head><body>'
        f'<h1>page {index}</h1><ul>{links}<li><a href="/private/x">private</a></li></ul>'
        f'<img src="/img/{index}-a.jpg" alt="a"><img src="/img/{index}-b.jpg" alt="b">'
        "</body></html>\n"
    ).encode()


class SimWeb:
    def __init__(self, pages: int, latency: float) -> None:
        self.pages = pages
        self.latency = latency
        self.records: list[list] = []

    def answer(self, path: str) -> tuple[int, str, bytes]:
        if path == "/robots.txt":
            return 200, "text/plain; charset=utf-8", ROBOTS
        if path.startswith("/p/"):
            number = path[3:]
            if number.isascii() and number.isdigit() and int(number) < self.pages:
                return 200, "text/html; charset=utf-8", page(int(number), self.pages)
        return 404, "text/plain; charset=utf-8", b"not found\n"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host = writer.get_extra_info("sockname")[0]
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                arrival = time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    return
                method, target, version = parts
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name:
                        headers[name.strip().lower()] = value.strip()
                length = headers.get("content-length", "0")
                if length.isdigit() and int(length):
                    await reader.readexactly(min(int(length), 2**20))
                keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                path = urlsplit(target).path or "/"
                status, content_type, body = self.answer(path)
                end = None
                try:
                    await asyncio.sleep(self.latency)
                    reason = "OK" if status == 200 else "Not Found"
                    writer.write(
                        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n".encode()
                        + (body if method != "HEAD" else b"")
                    )
                    await writer.drain()
                finally:
                    end = time.monotonic()
                    self.records.append([host, path, arrival, end])
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


async def run(args: argparse.Namespace) -> SimWeb:
    web = SimWeb(args.pages, args.latency_ms / 1000)
    servers = [
        await asyncio.start_server(
            web.serve, host=address, port=args.port, backlog=256, reuse_address=True, limit=MAX_HEAD_BYTES
        )
        for address in host_addresses(args.hosts)
    ]
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print("ready", flush=True)
    parent, deadline = os.getppid(), time.monotonic() + args.max_seconds
    while not stopping.is_set() and time.monotonic() < deadline and os.getppid() == parent:
        try:
            await asyncio.wait_for(stopping.wait(), 0.5)
        except TimeoutError:
            pass
    for server in servers:
        server.close()
    return web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--port", type=int, default=8200)
    parser.add_argument("--records", required=True, help="where the request records go (JSON) when it stops")
    parser.add_argument("--max-seconds", type=float, default=3600, help="stop by itself after this long")
    args = parser.parse_args()
    web = asyncio.run(run(args))
    with open(args.records, "w") as out:
        json.dump(web.records, out)
    sys.exit(0)


if __name__ == "__main__":
    main()
