"""Validate artifacts against the JSON Schemas in data_schemas/."""
import json
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "data_schemas"


def _registry():
    resources = []
    for f in SCHEMA_DIR.glob("*.schema.json"):
        resources.append((f.name, Resource.from_contents(json.loads(f.read_text()))))
    return Registry().with_resources(resources)


def validate(instance, schema_file: str):
    schema = json.loads((SCHEMA_DIR / schema_file).read_text())
    jsonschema.Draft202012Validator(schema, registry=_registry()).validate(instance)
