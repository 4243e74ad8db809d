#!/usr/bin/env python3
"""Every producer path against a running bmcfleet, printing `ok <step>` per step.

    python demo.py --server nats://127.0.0.1:4222 --machine rack12-node3 \
        [--failing-machine M] [--slow-machine M]

Run by tests/tests/python_producer.rs against the real stack (nats-server,
gateway, worker, bmc-sim); usable as-is against any deployment with
machines of your own (it powers the machine on and sets PXE boot once).
A rollout of the machine comes last.
Exits 1 at the first step that does not go as the contract says.
"""
import argparse
import asyncio
import sys

import nats

from bmcfleet import BmcfleetError, Client, error_of, new_batch_id


def ok(step, detail=""):
    print(f"ok {step}{' ' + detail if detail else ''}", flush=True)


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


async def refused(coro, code):
    """Awaits `coro`, which must be refused with `code`; returns the error."""
    try:
        await coro
    except BmcfleetError as e:
        expect(e.code == code, f"expected {code}, got {e.code}: {e.message}")
        return e
    raise AssertionError(f"expected a {code} refusal")


async def main(args):
    nc = await nats.connect(args.server)
    fleet = Client(nc)
    m = args.machine

    # 0. Plan first: what the batch would send, nothing changed on the BMC
    # ("plan": true; each action's result carries "plan").
    planned = await fleet.submit({"machine": m, "actions": [{"power": "cycle"}], "plan": True}, wait=True, timeout=70)
    expect(planned["state"] == "succeeded", planned)
    change = planned["results"][0]["plan"].get("change")
    expect(change is not None, planned["results"][0])
    ok("plan", f'{change["protocol"]} {change.get("action") or change.get("method")}')

    # 1. Submit and wait for the final result.
    batch = {"machine": m, "actions": [{"boot_device": {"device": "pxe", "persistent": False, "efi": True}},
                                       {"power": "on"}, {"power": "status"}], "deadline": "1m"}
    result = await fleet.submit(batch, wait=True, timeout=70)
    expect(result["state"] == "succeeded", result)
    expect(result["results"][2]["data"] == {"power_state": "on"}, result["results"][2])
    ok("submit_wait", result["id"])

    # 2. Status of that batch.
    status = await fleet.status(result["id"])
    expect(status["state"] == "succeeded" and status["result"] == result, status)
    ok("status", status["state"])

    # 3. Submit (accepted) and follow the events.
    batch_id, events = await fleet.submit_and_follow({"machine": m, "actions": [{"power": "cycle"}, "inventory"]})
    kinds = [kind async for kind, _ in events]
    expect(kinds == ["action_started", "action_finished"] * 2 + ["batch_finished"], kinds)
    ok("follow", " ".join(kinds))

    # 4. Resubmitting the same id is a no-op.
    again = await fleet.submit({"id": batch_id, "machine": m, "actions": [{"power": "cycle"}, "inventory"]})
    expect(again["duplicate"] is True and again["id"] == batch_id, again)
    ok("duplicate")

    # 5. Cancel: a finished batch is a conflict; a batch on a slow machine is cancelled.
    e = await refused(fleet.cancel(result["id"]), "conflict")
    expect(e.status == 409 and e.handling == "fix", (e.status, e.handling))
    ok("cancel_finished_conflict", str(e.status))
    if args.slow_machine:
        slow_id, slow_events = await fleet.submit_and_follow(
            {"machine": args.slow_machine, "actions": [{"power": "on"}] * 4, "on_error": "continue"})
        state = await fleet.cancel(slow_id)
        expect(state in ("queued", "running", "cancelled"), state)
        final = [e async for k, e in slow_events if k == "batch_finished"][0]["event"]["batch_finished"]["result"]
        expect(final["state"] == "cancelled", final)
        codes = [error_of(r).code for r in final["results"] if r["outcome"] == "error"]
        expect(codes and set(codes) == {"cancelled"}, codes)
        ok("cancel_running", f"{state}->{final['state']} {len(codes)} cancelled")

    # 6. A failing BMC: the action result carries the code; later actions are skipped.
    if args.failing_machine:
        r = await fleet.submit({"machine": args.failing_machine, "actions": [{"power": "on"}, {"power": "status"}]}, wait=True, timeout=70)
        # Whatever made it fail (a BMC error, a timeout, a refused login, an
        # unknown credential...), the first action carries a failure code
        # and the second was skipped.
        errors = [error_of(a) for a in r["results"]]
        expect(r["state"] == "failed" and len(errors) == 2 and errors[1].code == "skipped", r)
        expect(errors[0].handling != "outcome" and errors[1].handling == "outcome", errors)
        ok("action_errors", f"{errors[0].code} ({errors[0].handling}) skipped")

    # 7. Refusals: each with its code and Nats-Service-Error-Code status.
    cases = [
        ("malformed", fleet.request("submit", b"{not json")),
        ("malformed", fleet.request("submit", {"machine": m, "actions": ["inventory"], "priority": 1})),
        ("empty_batch", fleet.request("submit", {"machine": m, "actions": []})),
        ("too_many_actions", fleet.submit({"machine": m, "actions": ["inventory"] * 65})),
        ("machine_not_found", fleet.submit({"machine": "no-such-machine", "actions": ["inventory"]})),
        ("invalid_field", fleet.submit({"machine": m, "actions": [{"power_settle": {"op": "on", "escalate_after": "1m"}}]})),
        ("not_found", fleet.status(new_batch_id())),
        ("not_found", fleet.cancel(new_batch_id())),
    ]
    for code, coro in cases:
        e = await refused(coro, code)
        ok(f"refused {code}", str(e.status))

    # 8. A rollout: one request for many machines, run in waves by the gateways.
    rid, events = await fleet.run_rollout({"machines": [m], "actions": [{"power": "status"}], "max_parallel": 1})
    kinds = [kind async for kind, _ in events]
    view = await fleet.rollout_status(rid, limit=10)
    expect(view["rollout"]["state"] == "succeeded", view)
    expect([p["state"] for p in view["parts"]] == ["succeeded"], view["parts"])
    expect(any(r["id"] == rid for r in await fleet.rollouts(all=True)), "the rollout is listed")
    e = await refused(fleet.pause_rollout(rid), "conflict")
    ok("rollout", " ".join(kinds) + f" pause_finished {e.status}")
    await nc.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", default="nats://127.0.0.1:4222")
    p.add_argument("--machine", required=True)
    p.add_argument("--failing-machine")
    p.add_argument("--slow-machine")
    try:
        asyncio.run(main(p.parse_args()))
    except (AssertionError, BmcfleetError) as e:
        print(f"FAILED: {e!r}", file=sys.stderr)
        sys.exit(1)
