#!/usr/bin/env python3
"""Validate JSON-RPC traffic against schemas/methods/<method>.json.

As a program: reads a JSON-lines file where each line is
{"method": M, "params": P, "result": R} (params or result may be absent) and
exits 1 naming every violation. As a module: errors(method, part, document)."""
import json
import pathlib
import sys

import jsonschema
from jsonschema.validators import validator_for

HERE = pathlib.Path(__file__).resolve().parent
_cache = {}


def _store():
    store = {}
    for path in HERE.rglob("*.json"):
        doc = json.loads(path.read_text())
        store[path.as_uri()] = doc
        if "$id" in doc:
            store[doc["$id"]] = doc
    return store


def _validator(method, part):
    key = (method, part)
    if key not in _cache:
        path = HERE / "methods" / f"{method}.json"
        doc = json.loads(path.read_text())
        schema = doc[part]
        resolver = jsonschema.RefResolver(base_uri=path.as_uri(), referrer=doc, store=_store())
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        _cache[key] = cls(schema, resolver=resolver)
    return _cache[key]


def errors(method, part, document):
    """Messages for every way `document` violates the method's params/result schema."""
    out = []
    for e in _validator(method, part).iter_errors(document):
        where = "/".join(str(p) for p in e.absolute_path)
        out.append(f"{method} {part} at '{where}': {e.message}")
    return out


def main(path):
    failures = checked = 0
    for lineno, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        for part in ("params", "result"):
            if part in rec:
                checked += 1
                for msg in errors(rec["method"], part, rec[part]):
                    failures += 1
                    print(f"{path}:{lineno}: {msg}")
    print(f"schema check: {checked} documents, {failures} violations")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
