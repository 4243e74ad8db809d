#!/usr/bin/env python3
"""The fleet's observed state as bmcctl shows it: a machine whose record is
older than its poll interval plus the grace is `stale`, and its power (or
that of a machine that does not answer) `unknown`.

    python states.py --server nats://127.0.0.1:4222 [--stream BMCFLEET] [--json] [NAME...]

Reads the state bucket (`<STREAM>_STATE`) with the functions of bmcfleet
(freshness, power_now, contactable_now); it needs a user allowed to read
it (the shipped config's `admin`; tenants cannot). Prints one row per
machine: NAME POWER CONTACTABLE FRESHNESS LAST SEEN WORKER. Exits 1 when
the bucket cannot be read or a record breaks the contract.
"""
import argparse
import asyncio
import json
import sys

import nats

from bmcfleet import BmcfleetError, Client, contactable_now, freshness, now_ms, power_now


def ago(then, now):
    if then is None:
        return "never"
    s = max(0, now - then) // 1000
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m ago"
    if s < 86400:
        return f"{s // 3600}h ago"
    return f"{s // 86400}d ago"


async def main(args):
    nc = await nats.connect(args.server)
    try:
        states = await Client(nc).machine_states(args.stream)
    finally:
        await nc.close()
    now = now_ms()
    rows = [(n, s) for n, s in sorted(states.items()) if not args.names or n in args.names]
    if args.json:
        for name, s in rows:
            print(json.dumps({**s, "freshness": freshness(s, now), "power_now": power_now(s, now)}))
        return
    table = [("NAME", "POWER", "CONTACTABLE", "FRESHNESS", "LAST SEEN", "WORKER")]
    for name, s in rows:
        table.append((name, power_now(s, now) or "-", contactable_now(s, now), freshness(s, now),
                      ago(s.get("last_seen_ms"), now), s["worker"]))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="nats://127.0.0.1:4222")
    p.add_argument("--stream", default="BMCFLEET")
    p.add_argument("--json", action="store_true")
    p.add_argument("names", nargs="*")
    try:
        asyncio.run(main(p.parse_args()))
    except BmcfleetError as e:
        print(f"FAILED: {e!r}", file=sys.stderr)
        sys.exit(1)
