"""Checks the API's answers against the OpenAPI document that describes them.

Usage: python3 openapi_answers.py DOCUMENT ANSWERS

DOCUMENT is the served /api/v1/openapi.json; ANSWERS a JSON list of
{"method", "path" (the document's template), "status", "body"}. Each body
must match the schema the document gives for its operation and status,
with no property the schema does not name (unevaluatedProperties: false on
every object schema that lists properties). Prints every mismatch and
exits 1 when there is one.
"""

import copy
import json
import sys

from openapi_schema_validator import OAS31Validator


def closed(schema):
    """`schema` with every object schema that lists properties closed."""
    if isinstance(schema, dict):
        out = {key: closed(value) for key, value in schema.items()}
        if "properties" in out and "unevaluatedProperties" not in out:
            out["unevaluatedProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


def main():
    document = json.load(open(sys.argv[1]))
    answers = json.load(open(sys.argv[2]))
    components = closed(copy.deepcopy(document.get("components", {})))
    problems = []
    checked = 0
    for answer in answers:
        where = f'{answer["method"]} {answer["path"]} -> {answer["status"]}'
        operation = document["paths"][answer["path"]][answer["method"].lower()]
        response = operation["responses"].get(str(answer["status"]))
        if response is None:
            problems.append(f"{where}: the document lists no such status")
            continue
        content = response.get("content", {}).get("application/json")
        if content is None:
            if answer["body"] is not None:
                problems.append(f"{where}: a JSON body the document does not describe")
            continue
        root = closed(copy.deepcopy(content["schema"]))
        root["components"] = components
        for error in OAS31Validator(root).iter_errors(answer["body"]):
            pointer = "/".join(str(p) for p in error.absolute_path)
            problems.append(f"{where}: at /{pointer}: {error.message}")
        checked += 1
    for problem in problems:
        print(problem)
    print(f"{checked} answers checked, {len(problems)} mismatches")
    sys.exit(1 if problems else 0)


main()
