#!/usr/bin/env python3
"""A TCP relay that behaves like a slow link: every byte is serialised at a
fixed rate (default 100 Mbit/s) and delivered a fixed delay later (default
1 ms each way, so 2 ms round trip), in order, in both directions.

    bench/constrained_link.py 58440:58432 58441:58433 [--rate-mbit 100] [--delay-ms 1]

listens on 127.0.0.1:58440 and relays to 127.0.0.1:58432, and so on. Used by
bench/constrained-link, which points a copy of the cluster configuration at
the relays. The kernel's netem qdisc does the same more exactly; this relay
is for machines that lack it (containers without sch_netem). The event
loop's timers wake up to about a millisecond late, so the round trip it adds
is measured and printed by bench/constrained-link rather than assumed.
"""
import argparse
import asyncio
import collections
import signal
import sys
import time


class Direction:
    """One direction of one connection: a serialising link plus a delay."""

    def __init__(self, writer, rate_bytes_per_s, delay_s):
        self.writer = writer
        self.rate = rate_bytes_per_s
        self.delay = delay_s
        self.link_free = 0.0  # when the link finishes sending what it has
        self.queue = collections.deque()
        self.ready = asyncio.Event()
        self.closed = False

    def offer(self, data):
        now = time.monotonic()
        self.link_free = max(now, self.link_free) + len(data) / self.rate
        self.queue.append((self.link_free + self.delay, data))
        self.ready.set()

    def close(self):
        self.closed = True
        self.ready.set()

    async def deliver(self):
        try:
            while True:
                if not self.queue:
                    if self.closed:
                        break
                    self.ready.clear()
                    await self.ready.wait()
                    continue
                at, data = self.queue[0]
                wait = at - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self.queue.popleft()
                self.writer.write(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                self.writer.close()
            except Exception:
                pass


async def pump(reader, direction):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            direction.offer(data)
    except (ConnectionError, OSError):
        pass
    finally:
        direction.close()


def handler(target_port, rate, delay):
    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            return
        to_server = Direction(server_writer, rate, delay)
        to_client = Direction(client_writer, rate, delay)
        await asyncio.gather(pump(client_reader, to_server), pump(server_reader, to_client),
                             to_server.deliver(), to_client.deliver())

    return handle


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", help="LISTEN_PORT:TARGET_PORT")
    parser.add_argument("--rate-mbit", type=float, default=100.0)
    parser.add_argument("--delay-ms", type=float, default=1.0, help="one way")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    args = parser.parse_args()
    rate = args.rate_mbit * 1e6 / 8
    delay = args.delay_ms / 1e3
    servers = []
    for pair in args.pairs:
        listen, target = (int(p) for p in pair.split(":"))
        servers.append(await asyncio.start_server(handler(target, rate, delay), args.host, listen))
    print("relaying " + ", ".join(args.pairs) + f" at {args.rate_mbit:g} Mbit/s, {args.delay_ms:g} ms each way",
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
