"""Validate artifacts against the JSON Schemas in data_schemas/."""

import json
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "data_schemas"


def _registry():
    schemas = [json.loads(f.read_text()) for f in SCHEMA_DIR.glob("*.schema.json")]
    return Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)


def validate(instance, schema_file: str):
    schema = json.loads((SCHEMA_DIR / schema_file).read_text())
    jsonschema.Draft202012Validator(schema, registry=_registry()).validate(instance)
