"""A pyghmi BMC (what VirtualBMC runs) keeping real state, for bmcfleet's tests.

Started by bmcfleet_testing::ipmi::PyghmiBmc: binds 127.0.0.1 on the port
given (0: any free port), prints `PORT <n>` on stdout once it listens, and
writes its state to STATE_DIR/state.json on every change (power, boot
device, counters, the last boot flags received), replaced atomically so a
reader never sees half a file.

pyghmi's server offers cipher suite 3 only and answers any Open Session
proposal with suite 3's algorithms (status 0), as VirtualBMC does. It has
no user commands (Get/Set User *): those answer 0xC1.

Usage: bmc.py --port N --user NAME --state-dir DIR (password in the
environment variable PYGHMI_BMC_PASSWORD, never on the command line).
"""

import argparse
import json
import os
import socket
import sys

import pyghmi.ipmi.bmc as bmc


class StatefulBmc(bmc.Bmc):
    def __init__(self, authdata, port, state_dir):
        super().__init__(authdata, port=port, address="::ffff:127.0.0.1")
        self.state_dir = state_dir
        self.state = {
            "power": "off",
            "boot": "default",
            "resets": 0,
            "cycles": 0,
            "shutdowns": 0,
            "nmis": 0,
            "log": [],
        }
        self.save()

    def save(self):
        path = os.path.join(self.state_dir, "state.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f)
        os.replace(tmp, path)

    def record(self, entry):
        self.state["log"].append(entry)
        self.save()

    def get_power_state(self):
        return self.state["power"]

    def power_on(self):
        self.state["power"] = "on"
        self.record("power on")

    def power_off(self):
        self.state["power"] = "off"
        self.record("power off")

    def power_cycle(self):
        # Off, then on again: the machine is on afterwards.
        self.state["cycles"] += 1
        self.state["power"] = "on"
        self.record("power cycle")

    def power_reset(self):
        self.state["resets"] += 1
        self.record("power reset")

    def power_shutdown(self):
        self.state["shutdowns"] += 1
        self.state["power"] = "off"
        self.record("power shutdown")

    def pulse_diag(self):
        self.state["nmis"] += 1
        self.record("nmi")

    def is_active(self):
        return self.state["power"] == "on"

    def get_boot_device(self):
        return self.state["boot"]

    def set_boot_device(self, bootdevice):
        self.state["boot"] = bootdevice
        self.record("boot " + str(bootdevice))


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    parser = argparse.ArgumentParser(prog="bmc.py", description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--user", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    password = os.environ.get("PYGHMI_BMC_PASSWORD")
    if not password:
        sys.exit("PYGHMI_BMC_PASSWORD is not set")
    port = args.port or free_port()
    # pyghmi routes a session's packets by the port it was given: it must
    # be the real one (never 0).
    server = StatefulBmc({args.user: password}, port, args.state_dir)
    print("PORT %d" % server.serversocket.getsockname()[1], flush=True)
    server.listen()


if __name__ == "__main__":
    sys.exit(main())
