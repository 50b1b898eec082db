"""Request bodies built by tritonclient's own builder, for tests/oip.rs.

Usage: python tritonclient_requests.py OUT_DIR

Writes OUT_DIR/NAME.body for every case and OUT_DIR/manifest.json: per case
the header length tritonclient gives (None: JSON alone), the request id and
timeout, whether outputs were asked in binary, and per input its name,
datatype, shape and the numpy array's bytes (hex), which the decoded tensor
must equal bitwise. A second list, "bad", holds bodies the codec must refuse.
"""

import json
import os
import sys

import numpy as np
import tritonclient.http as http

DTYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16,
    "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64,
}
rng = np.random.default_rng(7)


def sample(datatype, shape, finite):
    dt = np.dtype(DTYPES[datatype])
    n = int(np.prod(shape))
    if datatype == "BOOL":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    # Random bits cover the whole range: extremes, subnormals, -0.0, and
    # (binary only) NaNs with payloads and infinities.
    a = np.frombuffer(rng.bytes(n * dt.itemsize), dtype=dt).copy()
    if dt.kind == "f" and finite:
        a[~np.isfinite(a)] = 0
    if dt.kind == "f" and n >= 4:
        a[:4] = [-0.0, np.finfo(dt).smallest_subnormal, np.finfo(dt).max, 0.1]
    return a.reshape(shape)


def tensor(name, datatype, array, binary):
    t = http.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array, binary_data=binary)
    return t


def record(t, array):
    return {"name": t.name(), "datatype": t.datatype(), "shape": list(array.shape),
            "hex": array.tobytes().hex()}


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
cases, bad = [], []


def write(name, body, header_length):
    with open(os.path.join(out, name + ".body"), "wb") as f:
        f.write(body)
    return {"name": name, "header_length": header_length}


for datatype in DTYPES:
    for binary in (False, True):
        name = f"{datatype.lower()}_{'binary' if binary else 'json'}"
        array = sample(datatype, (2, 3, 4), finite=not binary)
        t = tensor("input__0", datatype, array, binary)
        outputs = [http.InferRequestedOutput("output__0", binary_data=binary)]
        body, n = http.InferenceServerClient.generate_request_body(
            [t], outputs=outputs, request_id=name, timeout=1500)
        case = write(name, body, n)
        case.update(id=name, timeout_us=1500, binary_output=binary, inputs=[record(t, array)])
        cases.append(case)

# Several inputs at once, binary and JSON interleaved, no outputs named (so
# tritonclient asks for all of them in binary); an empty and a 0-d tensor.
arrays = [("FP32", sample("FP32", (3, 5), False), True),
          ("INT64", sample("INT64", (4,), True), False),
          ("BOOL", sample("BOOL", (2, 2), True), True),
          ("FP64", sample("FP64", (0, 3), True), True),
          ("INT32", sample("INT32", (), True), False),
          ("UINT8", sample("UINT8", (1, 7), True), False)]
ts = [tensor(f"input__{i}", d, a, b) for i, (d, a, b) in enumerate(arrays)]
body, n = http.InferenceServerClient.generate_request_body(ts)
case = write("mixed", body, n)
case.update(id=None, timeout_us=None, binary_output=True,
            inputs=[record(t, a) for t, (_, a, _) in zip(ts, arrays)])
cases.append(case)

# Bodies the codec refuses, for a model taking input__0: FP32 [-1, 4].
good = sample("FP32", (2, 4), True)


def build(ts, **kw):
    return http.InferenceServerClient.generate_request_body(ts, **kw)


body, n = build([tensor("x", "FP32", good, True)])
bad.append(write("wrong_name", body, n))
body, n = build([tensor("input__0", "FP64", good.astype(np.float64), False)])
bad.append(write("wrong_datatype", body, n))
body, n = build([tensor("input__0", "FP32", sample("FP32", (2, 5), True), True)])
bad.append(write("wrong_shape", body, n))
body, n = build([tensor("input__0", "FP32", good, True), tensor("input__1", "FP32", good, True)])
bad.append(write("two_inputs", body, n))
body, n = build([tensor("input__0", "UINT32", np.ones((2, 4), np.uint32), False)])
bad.append(write("unsupported_datatype", body, n))
body, n = build([tensor("input__0", "BYTES", np.array([[b"a", b"b"]], dtype=np.object_), True)])
bad.append(write("bytes_datatype", body, n))
body, n = build([tensor("input__0", "FP32", good, True)])
bad.append(write("truncated_binary", body[:-3], n))
bad.append(write("header_past_body", body, len(body) + 10))
bad.append(write("binary_without_header", body, None))
bad.append(write("invalid_json", body[: n - 1], None))
bad.append(write("not_utf8", b'{"inputs": [{"name": "\xff\xfe", "shape": [1], "datatype": "FP32", "data": [1]}]}', None))
body, n = build([tensor("input__0", "FP32", good, False)])
bad.append(write("json_count_mismatch", body.replace(b"[2, 4]", b"[3, 4]").replace(b"[2,4]", b"[3,4]"), n))

with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump({"cases": cases, "bad": bad}, f)
