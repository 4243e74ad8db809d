"""Reference Redfish client for bmc-bench: the OpenStack python `sushy` library.

Does the same operations as bmcfleet's Redfish provider, with the same
requests per operation, and times them itself (interpreter start-up and
connection set-up are not timed, as they are not for bmcfleet):

- power status: GET the ComputerSystem (system.refresh) and read PowerState;
- set boot override: GET (fresh state, allowed values), PATCH, GET (read back
  and verify);
- get boot override: GET the ComputerSystem;
- inventory: GET the ComputerSystem and its Manager.

Usage: python sushy_ref.py '<json settings>'; prints one JSON object.
"""
import json
import sys
import time

import sushy
from sushy import auth


def emulator_cpu(pid):
    """user+system CPU seconds of the emulator process (None if unknown)."""
    if not pid:
        return None
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100.0
    except (OSError, IndexError, ValueError):
        return None


def main():
    a = json.loads(sys.argv[1])
    conn = sushy.Sushy(
        a["base"] + "/redfish/v1/",
        auth=auth.BasicAuth(a["username"], a["password"]),
        verify=a["ca"],
    )
    system = conn.get_system(a["system"])
    manager = conn.get_manager(a["manager"])

    def status():
        system.refresh(force=True)
        if system.power_state is None:
            raise RuntimeError("no PowerState")
        return system.power_state

    def set_boot(target, enabled, mode):
        system.refresh(force=True)
        kwargs = {"target": target, "enabled": enabled}
        if system.boot.mode is not None:
            kwargs["mode"] = mode
        system.set_system_boot_options(**kwargs)
        system.refresh(force=True)
        boot = system.boot
        if boot.target != target:
            raise RuntimeError("boot target reads back %s" % boot.target)
        if boot.mode is not None and boot.mode != mode:
            raise RuntimeError("boot mode reads back %s" % boot.mode)

    def get_boot():
        system.refresh(force=True)
        b = system.boot
        return (b.target, b.enabled, b.mode)

    def inventory():
        system.refresh(force=True)
        manager.refresh(force=True)
        return {
            "manufacturer": system.manufacturer,
            "model": system.model,
            "serial": system.serial_number,
            "firmware": manager.firmware_version,
            "power": system.power_state,
        }

    def batch():
        status()
        set_boot(sushy.BOOT_SOURCE_TARGET_PXE, sushy.BOOT_SOURCE_ENABLED_ONCE, sushy.BOOT_SOURCE_MODE_UEFI)
        get_boot()
        inventory()
        set_boot(sushy.BOOT_SOURCE_TARGET_HDD, sushy.BOOT_SOURCE_ENABLED_CONTINUOUS, sushy.BOOT_SOURCE_MODE_UEFI)

    if a["mode"] == "status":
        end = time.monotonic() + a["warmup_s"]
        while time.monotonic() < end:
            status()
        n = 0
        emu0 = emulator_cpu(a.get("emulator_pid"))
        cpu0 = time.process_time()
        t0 = time.monotonic()
        while time.monotonic() - t0 < a["duration_s"]:
            status()
            n += 1
        elapsed = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        emu1 = emulator_cpu(a.get("emulator_pid"))
        emu = None if emu0 is None or emu1 is None else emu1 - emu0
        print(json.dumps({"ops": n, "elapsed_s": elapsed, "cpu_s": cpu, "emulator_cpu_s": emu}))
    elif a["mode"] == "batch":
        for _ in range(a["warmup_batches"]):
            batch()
        lat = []
        for _ in range(a["batches"]):
            t0 = time.monotonic()
            batch()
            lat.append((time.monotonic() - t0) * 1e3)
        print(json.dumps({"latencies_ms": lat}))
    elif a["mode"] == "check":
        batch()
        print(json.dumps({"ok": True, "sushy": sushy.__version__ if hasattr(sushy, "__version__") else "?"}))
    else:
        raise SystemExit("unknown mode %r" % a["mode"])


if __name__ == "__main__":
    main()
