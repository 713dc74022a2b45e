#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""k8s_schema.py FILE...: check Kubernetes manifests against the API's own
object models, offline.

The models are Debian's python3-kubernetes, generated from Kubernetes'
OpenAPI spec: every field of every object must be one its type has, with
a value of the type the model says (a list, a map, a string, a number, a
boolean, another object), and what an object requires must be there (the
models' own checks).  `kubectl --dry-run=client` would do much the same,
but it asks an API server for its discovery first, even client-side.

Prints one line per fault, "FILE: KIND NAME: PATH: what", and exits 1 if
there was any, 2 on bad usage or an object of a kind the models lack.
"""
import json
import re
import sys

import yaml
from kubernetes import client

# openapi type names of the models that are not themselves models
SCALARS = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "date": (str,),
    "datetime": (str,),
    "object": None,  # IntOrString, RawExtension: anything
    "quantity": (str, int, float),  # see QUANTITIES
}

# Fields whose values are resource quantities: the models type them as
# strings, but the API takes a number too ("nvidia.com/gpu: 1")
QUANTITIES = {
    ("V1ResourceRequirements", "limits"),
    ("V1ResourceRequirements", "requests"),
    ("V1PersistentVolumeSpec", "capacity"),
    ("V1PodSpec", "overhead"),
    ("V1EmptyDirVolumeSource", "size_limit"),
    ("V1ResourceQuotaSpec", "hard"),
}


def model_of(api_version, kind):
    """The model class of apiVersion/kind: apps/v1 DaemonSet -> V1DaemonSet."""
    version = api_version.rpartition("/")[2]
    return getattr(client, version[:1].upper() + version[1:] + kind, None)


def child(path, key):
    """The path of field or key @key of the object at @path ("" the top)."""
    return "%s.%s" % (path, key) if path else str(key)


def walk(value, typ, path, faults):
    """Check @value against openapi type @typ; faults get 'PATH: what'."""
    if value is None:
        return  # an absent optional field; required ones: the models' check
    m = re.fullmatch(r"list\[(.+)\]", typ)
    if m:
        if not isinstance(value, list):
            faults.append("%s: a list expected, not %r" % (path, value))
            return
        for i, v in enumerate(value):
            walk(v, m.group(1), "%s[%d]" % (path, i), faults)
        return
    m = re.fullmatch(r"dict\((\w+), (.+)\)", typ)
    if m:
        if not isinstance(value, dict):
            faults.append("%s: a map expected, not %r" % (path, value))
            return
        for k, v in value.items():
            walk(v, m.group(2), child(path, k), faults)
        return
    if typ in SCALARS:
        want = SCALARS[typ]
        # YAML's true is no number, and a number is no string
        if want is not None and (not isinstance(value, want) or
                                 (isinstance(value, bool) and bool not in want)):
            faults.append("%s: %s expected, not %r" % (path, typ, value))
        return
    cls = getattr(client, typ, None)
    if cls is None:
        faults.append("%s: type %s is not in the models" % (path, typ))
        return
    if not isinstance(value, dict):
        faults.append("%s: a %s object expected, not %r" % (path, typ, value))
        return
    field = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    for k, v in value.items():
        if k not in field:
            faults.append("%s: %s has no such field" % (child(path, k), typ))
            continue
        t = cls.openapi_types[field[k]]
        if (typ, field[k]) in QUANTITIES:
            t = t.replace("str", "quantity")
        walk(v, t, child(path, k), faults)


class _Response:
    """What ApiClient.deserialize reads: a response's JSON text."""

    def __init__(self, doc):
        self.data = json.dumps(doc)


def check_doc(doc):
    """Faults of one manifest document (a list of strings)."""
    if not isinstance(doc, dict):
        return ["not an object"]
    cls = model_of(doc.get("apiVersion", ""), doc.get("kind", ""))
    if cls is None:
        raise LookupError("%s %s: no such kind in the models" %
                          (doc.get("apiVersion"), doc.get("kind")))
    faults = []
    walk(doc, cls.__name__, "", faults)
    if not faults:
        # the models' own checks: required fields, enumerations
        try:
            client.ApiClient().deserialize(_Response(doc), cls.__name__)
        except (ValueError, TypeError) as e:
            faults.append(str(e))
    return faults


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    bad = 0
    for path in argv[1:]:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for doc in docs:
            name = "%s %s" % (doc.get("kind"), (doc.get("metadata") or {}).get("name"))
            try:
                faults = check_doc(doc)
            except LookupError as e:
                print("%s: %s" % (path, e), file=sys.stderr)
                return 2
            for fault in faults:
                print("%s: %s: %s" % (path, name, fault))
                bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv))
