"""Response bodies parsed by tritonclient's own parser, for tests/oip.rs.

Usage: python tritonclient_responses.py DIR

Reads DIR/manifest.json (per case: name, header_length, output names), parses
DIR/NAME.body with InferenceServerClient.parse_response_body, and writes
DIR/parsed.json: per case the response's model_name and id, and per output
the numpy array's dtype, shape and bytes (hex) from InferResult.as_numpy.
"""

import json
import os
import sys

import tritonclient.http as http

d = sys.argv[1]
with open(os.path.join(d, "manifest.json")) as f:
    manifest = json.load(f)
parsed = {}
for case in manifest:
    with open(os.path.join(d, case["name"] + ".body"), "rb") as f:
        body = f.read()
    result = http.InferenceServerClient.parse_response_body(
        body, header_length=case["header_length"])
    response = result.get_response()
    outputs = []
    for name in case["outputs"]:
        a = result.as_numpy(name)
        outputs.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape),
                        "hex": a.tobytes().hex()})
    parsed[case["name"]] = {"model_name": response["model_name"],
                            "id": response.get("id"), "outputs": outputs}
with open(os.path.join(d, "parsed.json"), "w") as f:
    json.dump(parsed, f)
