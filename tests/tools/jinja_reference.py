#!/usr/bin/env python3
"""Renders Jinja templates with Python's jinja2 as transformers' apply_chat_template does,
the reference for onepass's Jinja interpreter tests.

  jinja_reference.py CASES.json OUT.json

CASES.json: a list of {"template": str, "variables": {...}}. OUT.json: for each case either
{"text": rendered} or {"error": message} (a template error or raise_exception).
Exit status 3 means jinja2 is missing (the C++ test then skips).
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja_reference: python package 'jinja2' is missing", file=sys.stderr)
    sys.exit(3)


def environment():
    # The settings and extra globals of transformers' _compile_jinja_template.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    env = environment()
    with open(argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            text = env.from_string(case["template"]).render(**case["variables"])
            results.append({"text": text})
        except Exception as error:  # every failure is a result the C++ side must match
            results.append({"error": f"{type(error).__name__}: {error}"})
    with open(argv[2], "w", encoding="utf-8") as out:
        json.dump(results, out, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
