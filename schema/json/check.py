#!/usr/bin/env python3
"""Validates JSON values against bmcfleet's schemas (schema/json/*.json).

Reads JSON lines on stdin: {"label", "schema": "batch.json", "instance", "valid": true|false}.
Prints one line per value whose verdict differs from "valid", then "checked N".
Exit status 1 if any differed. Used by schema/tests/json_schema.rs; the
Python producer (examples/python) loads the same files with `registry()`.
"""
import json
import pathlib
import sys

import jsonschema
from referencing import Registry, Resource

HERE = pathlib.Path(__file__).resolve().parent


def registry():
    resources = []
    for path in sorted(HERE.glob("*.json")):
        doc = json.loads(path.read_text())
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


def validator(name, reg):
    doc = json.loads((HERE / name).read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return jsonschema.Draft202012Validator(doc, registry=reg, format_checker=jsonschema.FormatChecker())


def main():
    reg = registry()
    validators = {}
    bad = n = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        n += 1
        v = validators.setdefault(case["schema"], validator(case["schema"], reg))
        errors = list(v.iter_errors(case["instance"]))
        if case["valid"] and errors:
            bad += 1
            best = jsonschema.exceptions.best_match(errors)
            print(f"{case['label']}: refused by {case['schema']}: {best.message} at {list(best.absolute_path)}")
        elif not case["valid"] and not errors:
            bad += 1
            print(f"{case['label']}: accepted by {case['schema']} but must be refused")
    print(f"checked {n}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
