#!/usr/bin/env python3
"""Validates profile documents produced by the C++ code against
schemas/profile.schema.json, and checks that the schema rejects documents the
C++ code would never produce (so the schema is not vacuous).

usage: validate_profile_schema.py SCHEMA SAMPLES_PROGRAM
"""
import copy
import json
import subprocess
import sys

import jsonschema


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    schema_path, samples_program = sys.argv[1], sys.argv[2]
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)

    out = subprocess.run([samples_program], check=True, capture_output=True, text=True).stdout
    docs = [json.loads(line) for line in out.splitlines() if line.strip()]
    if len(docs) < 100:
        print(f"expected at least 100 sample documents, got {len(docs)}", file=sys.stderr)
        return 1

    failures = 0
    for i, doc in enumerate(docs):
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors:
            failures += 1
            print(f"sample {i}: {'/'.join(map(str, e.path))}: {e.message}", file=sys.stderr)

    # Documents the C++ code never produces must be rejected.
    base = next(d for d in docs if d["functions"])
    fn = next(iter(base["functions"]))

    def mutated(change):
        d = copy.deepcopy(base)
        change(d)
        return d

    negatives = {
        "format 2": mutated(lambda d: d.update(format=2)),
        "missing knobs": mutated(lambda d: d.pop("knobs")),
        "extra top-level field": mutated(lambda d: d.update(extra=1)),
        "opt_level 4": mutated(lambda d: d["knobs"].update(opt_level=4)),
        "size_level -1": mutated(lambda d: d["knobs"].update(size_level=-1)),
        "unroll as string": mutated(lambda d: d["knobs"].update(unroll="yes")),
        "inline_threshold too big": mutated(lambda d: d["knobs"].update(inline_threshold=100001)),
        "unknown mode": mutated(lambda d: d["knobs"].update(mode="fast")),
        "missing mode": mutated(lambda d: d["knobs"].pop("mode")),
        "text_offset 8": mutated(lambda d: d["knobs"].update(text_offset=8)),
        "text_offset 64": mutated(lambda d: d["knobs"].update(text_offset=64)),
        "cfg_hash not hex": mutated(lambda d: d["functions"][fn].update(cfg_hash="xyz")),
        "cfg_hash short": mutated(lambda d: d["functions"][fn].update(cfg_hash="2a")),
        "negative count": mutated(lambda d: d["functions"][fn].update(counts=[-1])),
        "count above 2^64-1": mutated(lambda d: d["functions"][fn].update(counts=[2**64])),
        "unpredictable above 2^32-1": mutated(
            lambda d: d["functions"][fn].update(unpredictable=[2**32])),
        "empty fingerprint": mutated(lambda d: d["functions"][fn].update(fingerprint="")),
        "function not an object": mutated(lambda d: d["functions"].update({fn: [1, 2]})),
        "hardware array": mutated(lambda d: d.update(hardware=[])),
        "bad created_at": mutated(lambda d: d["provenance"].update(created_at="yesterday")),
        "sampling without time shares": mutated(
            lambda d: d["hardware"].update(sampling={"event": "cpu-clock", "stages": 1})),
        "time share above 1": mutated(lambda d: d["hardware"].update(sampling={
            "event": "cpu-clock", "stages": 1, "samples": 1, "outside_samples": 0,
            "time_share": {"f": 1.5}, "misses": {}})),
        "negative miss samples": mutated(lambda d: d["hardware"].update(sampling={
            "event": "cpu-clock", "stages": 1, "samples": 1, "outside_samples": 0,
            "time_share": {"f": 1.0}, "misses": {"branch-misses": {"f": -1}}})),
        "negative stage": mutated(lambda d: d["provenance"].update(stage=-1)),
        "missing provenance.host": mutated(lambda d: d["provenance"].pop("host")),
    }
    for name, doc in negatives.items():
        if validator.is_valid(doc):
            failures += 1
            print(f"schema accepted a bad document: {name}", file=sys.stderr)

    print(f"{len(docs)} sample documents validated, {len(negatives)} bad documents rejected, "
          f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
