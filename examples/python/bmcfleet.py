"""A bmcfleet producer in Python, written from schema/asyncapi.yaml.

Talks to the gateway's NATS micro service (`bmcfleet.submit`, `.status`,
`.cancel`) in JSON and follows batch events (`bmc.events.<tenant>.<batch>`,
MessagePack). Every reply and event is validated against the JSON Schemas in
schema/json/ (pass `validate=False` to skip that in production).

    import asyncio, nats
    from bmcfleet import Client, BmcfleetError

    async def main():
        nc = await nats.connect("nats://127.0.0.1:4222")
        fleet = Client(nc)
        batch = {"machine": "rack12-node3",
                 "actions": [{"boot_device": {"device": "pxe", "persistent": False, "efi": True}},
                             {"power": "on"}]}
        try:
            result = await fleet.submit(batch, wait=True)
        except BmcfleetError as e:
            print(e.code, e.handling, e.message)

Requirements (pinned): requirements.txt.
"""

import asyncio
import json
import os
import pathlib
import secrets
import time

import msgpack

SCHEMA_DIR = pathlib.Path(os.environ.get("BMCFLEET_SCHEMA_DIR", pathlib.Path(__file__).resolve().parents[2] / "schema" / "json"))

# How a producer handles each error code (schema/asyncapi.yaml, ErrorCode).
# "fix": the request is wrong, do not resend it unchanged; "retry": transient,
# resend later (the same batch id makes a resend a no-op if the first was
# stored); "operator": needs someone to change the deployment (registry,
# credentials, policy, limits); "bmc": the BMC or machine failed the action;
# "outcome": not a failure of the action itself (cancelled, skipped, or it
# may or may not have happened).
HANDLING = {
    # admission (the gateway refused; nothing was stored)
    "malformed": "fix",
    "too_large": "fix",
    "empty_batch": "fix",
    "too_many_actions": "fix",
    "invalid_address": "fix",
    "invalid_field": "fix",
    "inline_credentials_disabled": "operator",
    "raw_not_allowed": "operator",
    "not_found": "fix",
    "machine_not_found": "operator",
    "target_forbidden": "operator",
    "conflict": "fix",
    "unavailable": "retry",
    "bmc_queue_full": "retry",
    # execution (action results)
    "unknown_credential": "operator",
    "credential_unavailable": "operator",
    "unsupported_protocol": "operator",
    "unsupported": "fix",
    "auth_failed": "operator",
    "permission_denied": "operator",
    "unreachable": "retry",
    "timeout": "retry",
    "not_reached": "bmc",
    "deadline_exceeded": "retry",
    "bmc_error": "bmc",
    "protocol_error": "bmc",
    "target_not_found": "fix",
    "interrupted": "outcome",
    "circuit_open": "retry",
    "cancelled": "outcome",
    "skipped": "outcome",
    "worker_exhausted": "retry",
    "firmware_update_disabled": "operator",
    "firmware_image_invalid": "operator",
    "update_failed": "bmc",
    "internal": "operator",
}


class BmcfleetError(Exception):
    """Every error of this module: a refusal from the gateway or an action's
    error (`code`, an ErrorCode; `message`; `status`, the
    Nats-Service-Error-Code header, an HTTP-like status, for refusals), or
    a message that breaks the contract ([`SchemaError`]). One `except
    BmcfleetError` catches them all."""

    def __init__(self, code, message, status=None):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status

    @property
    def handling(self):
        return HANDLING[self.code]

    @property
    def retryable(self):
        return self.handling == "retry"


class SchemaError(BmcfleetError):
    """A message that does not match the contract (code `schema_mismatch`,
    not an ErrorCode of the wire): the gateway and this client disagree on
    the contract's version, which only an operator can fix."""

    def __init__(self, message):
        super().__init__("schema_mismatch", message)

    @property
    def handling(self):
        return "operator"


class Schemas:
    """The JSON Schemas of schema/json/, by file name."""

    def __init__(self, directory=SCHEMA_DIR):
        import jsonschema
        from referencing import Registry, Resource

        docs = {p.name: json.loads(p.read_text()) for p in pathlib.Path(directory).glob("*.json")}
        registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs.values())
        self._validators = {name: jsonschema.Draft202012Validator(d, registry=registry) for name, d in docs.items()}
        self.error_codes = docs["defs.json"]["$defs"]["ErrorCode"]["enum"]

    def check(self, schema, value):
        errors = sorted(self._validators[schema].iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            raise SchemaError(f"{schema}: {errors[0].message} at {list(errors[0].absolute_path)}")
        return value


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_batch_id():
    """A ULID: 48 bits of milliseconds, 80 random bits, Crockford base 32."""
    n = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


class Client:
    def __init__(self, nc, service_prefix="bmcfleet", subject_prefix="bmc", validate=True, timeout=10.0):
        self.nc, self.service, self.prefix, self.timeout = nc, service_prefix, subject_prefix, timeout
        self.schemas = Schemas() if validate else None
        if self.schemas is not None and set(self.schemas.error_codes) != set(HANDLING):
            raise SchemaError(f"HANDLING does not cover the contract's error codes: {sorted(set(self.schemas.error_codes) ^ set(HANDLING))}")

    def _check(self, schema, value):
        return self.schemas.check(schema, value) if self.schemas else value

    async def request(self, endpoint, body, headers=None, timeout=None):
        """One request to the gateway; returns the reply's single key and value
        (`accepted`, `result`, `status`, `cancelled`) or raises BmcfleetError."""
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json", **(headers or {})}
        msg = await self.nc.request(f"{self.service}.{endpoint}", payload, timeout=timeout or self.timeout, headers=h)
        reply = self._check("reply.json", json.loads(msg.data))
        ((kind, value),) = reply.items()
        rh = msg.headers or {}
        if rh.get("Content-Type") != "application/json":
            raise SchemaError(f"reply Content-Type {rh.get('Content-Type')!r}")
        if kind == "error":
            status = rh.get("Nats-Service-Error-Code")
            if status is None or rh.get("Nats-Service-Error") != value["message"]:
                raise SchemaError(f"an error reply without its Nats-Service-Error headers: {rh}")
            raise BmcfleetError(value["code"], value["message"], int(status))
        return kind, value

    async def submit(self, batch, wait=False, timeout=None, traceparent=None):
        """Submit a batch (validated first). Returns Accepted, or with
        wait=True the final BatchResult (the gateway waits up to the batch's
        deadline, so give a timeout beyond it)."""
        if isinstance(batch, dict):
            self._check("batch.json", batch)
        headers = {"Bmcfleet-Wait": "true"} if wait else {}
        if traceparent:
            headers["traceparent"] = traceparent
        kind, value = await self.request("submit", batch, headers, timeout)
        expected = "result" if wait else "accepted"
        if kind != expected:
            raise SchemaError(f"submit replied {kind}, expected {expected}")
        return value

    async def status(self, batch_id):
        kind, value = await self.request("status", {"id": batch_id})
        assert kind == "status", kind
        return value

    async def cancel(self, batch_id):
        """Returns the batch's state after the cancel request (a running
        batch stops before its next action: follow it to its end)."""
        kind, value = await self.request("cancel", {"id": batch_id})
        assert kind == "cancelled", kind
        return value["state"]

    async def events(self, batch_id):
        """An async iterator over one batch's events until `batch_finished`:
        (kind, event). Subscribe (enter it) before submitting, so nothing is missed."""
        sub = await self.nc.subscribe(f"{self.prefix}.events.*.{batch_id}")
        await self.nc.flush()
        return _Events(self, sub)

    async def submit_and_follow(self, batch, timeout=60.0):
        """Submit a batch and yield its events as they happen."""
        batch = {**batch, "id": batch.get("id") or new_batch_id()}
        events = await self.events(batch["id"])
        await self.submit(batch)
        return batch["id"], events.until(timeout)


    async def machine_states(self, stream="BMCFLEET"):
        """Every machine's observed state (see the module's machine_states),
        each record validated against the schemas."""
        return await machine_states(self.nc, stream, self.schemas)

    # ---------------------------------------------------------- rollouts
    # One request, many machines, run in waves by the gateways (docs/ROLLOUTS.md).

    async def rollout(self, endpoint, body, timeout=None):
        """A request to `<service-prefix>.rollout.<endpoint>`; returns the reply's value."""
        kind, value = await self.request(f"rollout.{endpoint}", body, timeout=timeout or max(self.timeout, 60.0))
        expected = "rollouts" if endpoint == "list" else "rollout"
        if kind != expected:
            raise SchemaError(f"rollout.{endpoint} replied {kind}, expected {expected}")
        return value

    async def submit_rollout(self, request):
        """Submit a rollout (validated first): `selector` or `machines`, `actions`,
        `max_parallel`, `canary`, `stop_after_failures`, ... Returns its view
        (`rollout`: the record, `duplicate`). Give an `id` (new_batch_id()) to
        make a resubmission after a lost reply a no-op."""
        return await self.rollout("submit", self._check("rollout-request.json", request))

    async def rollout_status(self, rollout_id, start=0, limit=0):
        """The rollout's record, and machines start..start+limit (`parts`)."""
        return await self.rollout("status", {"id": rollout_id, "from": start, "limit": limit})

    async def pause_rollout(self, rollout_id):
        return (await self.rollout("pause", {"id": rollout_id}))["rollout"]

    async def resume_rollout(self, rollout_id):
        return (await self.rollout("resume", {"id": rollout_id}))["rollout"]

    async def abort_rollout(self, rollout_id):
        return (await self.rollout("abort", {"id": rollout_id}))["rollout"]

    async def rollouts(self, all=False):
        return (await self.rollout("list", {"all": all}))["rollouts"]

    async def run_rollout(self, request, timeout=600.0):
        """Submit a rollout and yield its events (type, event) until
        `rollout_finished`. Subscribes first, so nothing is missed; the rollout
        goes on if this process dies (follow it again with rollout_events)."""
        request = {**request, "id": request.get("id") or new_batch_id()}
        events = await self.rollout_events(request["id"])
        await self.submit_rollout(request)
        return request["id"], events.until(timeout)

    async def rollout_events(self, rollout_id):
        sub = await self.nc.subscribe(f"{self.prefix}.events.*.rollout.{rollout_id}")
        await self.nc.flush()
        return _RolloutEvents(self, sub)


class _RolloutEvents:
    def __init__(self, client, sub):
        self.client, self.sub = client, sub

    async def until(self, timeout):
        deadline = time.monotonic() + timeout
        try:
            while True:
                msg = await self.sub.next_msg(timeout=max(0.01, deadline - time.monotonic()))
                event = self.client._check("rollout-event.json", msgpack.unpackb(msg.data, raw=False))
                kind = event["event"]["type"]
                if (msg.headers or {}).get("Bmcfleet-Event") != kind:
                    raise SchemaError(f"Bmcfleet-Event {(msg.headers or {}).get('Bmcfleet-Event')!r} on a {kind} event")
                yield kind, event
                if kind == "rollout_finished":
                    return
        finally:
            await self.sub.unsubscribe()


class _Events:
    def __init__(self, client, sub):
        self.client, self.sub = client, sub

    async def until(self, timeout):
        deadline = time.monotonic() + timeout
        try:
            while True:
                msg = await self.sub.next_msg(timeout=max(0.01, deadline - time.monotonic()))
                if (msg.headers or {}).get("Content-Type") != "application/msgpack":
                    raise SchemaError(f"event Content-Type {msg.headers}")
                event = self.client._check("event.json", msgpack.unpackb(msg.data, raw=False))
                (kind,) = event["event"].keys()
                if msg.headers.get("Bmcfleet-Event") != kind:
                    raise SchemaError(f"Bmcfleet-Event {msg.headers.get('Bmcfleet-Event')!r} on a {kind} event")
                yield kind, event
                if kind == "batch_finished":
                    return
        finally:
            await self.sub.unsubscribe()


# ------------------------------------------------------------- machine state
# What the owning worker last observed of each registered machine (issue 19
# and 34): the JSON records of the KV bucket `<STREAM>_STATE` (key: machine
# name; schema machine-state.json), and each partition's latest word on its
# polled machines (key `_seen.p<N>`, partition-seen.json), written between a
# machine's own writes. A record says how old it is: read it as bmcctl does.

SEEN_KEY_PREFIX = "_seen.p"


def now_ms():
    return int(time.time() * 1000)


def observed_at(state):
    """When the machine was last observed (`observed_ms`; records from before
    issue 34 carry only `updated_ms`)."""
    return state.get("observed_ms", state["updated_ms"])


def freshness(state, now=None):
    """`current`, `stale` or `unknown`, as bmcctl judges it: stale once the
    last observation is older than the record's `stale_after_ms` (the poll
    interval plus the grace the worker computed: schema/src/state.rs,
    `stale_after`); unknown when the record gives no limit (not polled)."""
    limit = state.get("stale_after_ms")
    if limit is None:
        return "unknown"
    return "stale" if (now_ms() if now is None else now) - observed_at(state) > limit else "current"


def power_now(state, now=None):
    """The power as far as it is known: the last reading only while the
    machine answers and its record is not stale; `unknown` otherwise (never
    the last known power as if current). None: never read."""
    if not state["contactable"] or freshness(state, now) == "stale":
        return "unknown"
    return state.get("power")


def contactable_now(state, now=None):
    """bmcctl's CONTACTABLE cell: `stale`, `yes`, `no (<error code>)`."""
    if freshness(state, now) == "stale":
        return "stale"
    if state["contactable"]:
        return "yes"
    return f"no ({state['error_code']})" if state.get("error_code") else "no"


def merge_seen(state, seen, worker):
    """Take in a partition record's later word on the machine (`seen`, a
    SeenAt of the partition written by `worker`), as bmcctl does."""
    state = dict(state)
    if seen["observed_ms"] > observed_at(state):
        state["observed_ms"], state["worker"] = seen["observed_ms"], worker
        if seen.get("stale_after_ms") is not None:
            state["stale_after_ms"] = seen["stale_after_ms"]
    if seen.get("last_seen_ms") is not None and seen["last_seen_ms"] > state.get("last_seen_ms", -1):
        state["last_seen_ms"] = seen["last_seen_ms"]
    return state


class StateUnavailable(BmcfleetError):
    """The state bucket cannot be read (code `unavailable`, retry later)."""

    def __init__(self, message):
        super().__init__("unavailable", message)


async def machine_states(nc, stream="BMCFLEET", schemas=None):
    """Every machine's observed state, {name: record}, with the partitions'
    later observations merged in. Needs a user that may read the bucket
    and list its keys (the shipped config's `admin`; a tenant may not: its
    machine events carry the record as of each change only). No bucket
    yet (no worker ever ran): {}. Raises StateUnavailable otherwise."""
    import nats.js.errors

    js = nc.jetstream()
    try:
        kv = await js.key_value(f"{stream}_STATE")
    except nats.js.errors.BucketNotFoundError:
        return {}
    except Exception as e:  # noqa: BLE001 (every failure is one kind to the caller)
        raise StateUnavailable(f"cannot open the bucket {stream}_STATE: {e!r}") from e
    try:
        try:
            keys = await kv.keys()
        except nats.js.errors.NoKeysError:
            return {}
        states, seen = {}, {}
        for key in keys:
            entry = await kv.get(key)
            if entry is None or entry.value is None:
                continue
            record = json.loads(entry.value)
            if key.startswith(SEEN_KEY_PREFIX):
                if schemas:
                    schemas.check("partition-seen.json", record)
                for name, at in record["machines"].items():
                    if name not in seen or at["observed_ms"] > seen[name][0]["observed_ms"]:
                        seen[name] = (at, record["worker"])
            else:
                states[key] = schemas.check("machine-state.json", record) if schemas else record
    except BmcfleetError:
        raise
    except Exception as e:  # noqa: BLE001
        raise StateUnavailable(f"cannot read the bucket {stream}_STATE: {e!r}") from e
    return {name: merge_seen(s, *seen[name]) if name in seen else s for name, s in states.items()}


def error_of(action_result):
    """The BmcfleetError of a failed action result, or None."""
    e = action_result.get("error")
    return BmcfleetError(e["code"], e["message"]) if e else None
