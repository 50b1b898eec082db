"""Drives a running server with the Open Inference Protocol's own client,
tritonclient[http], for tests/serve/oip.rs.

Usage: python oip_client.py HOST:PORT MODEL REF.json

REF.json: "x" and "y" (float32 bit patterns as int32, row-major), their
shapes "x_shape" and "y_shape", "exact" (the server's answer must equal "y"
bitwise) or else "tolerance" (the largest absolute difference).

Checks: live, ready, model ready; the model's metadata; one request in each
of the four encodings (JSON or binary input, JSON or binary output), all
equal bitwise and equal to "y"; outputs not named (all of them, binary);
single rows sent 16 at a time (batched by the server), each right; and the
errors: an unknown model (404), a wrong input name, datatype or shape (400),
a timeout passed before the forward (504). Prints "ok" at the end.
"""

import json
import sys

import numpy as np
import tritonclient.http as http
from tritonclient.utils import InferenceServerException

url, model, ref_path = sys.argv[1:4]
with open(ref_path) as f:
    ref = json.load(f)
x = np.array(ref["x"], dtype=np.int32).view(np.float32).reshape(ref["x_shape"])
y = np.array(ref["y"], dtype=np.int32).view(np.float32).reshape(ref["y_shape"])
rows, features = x.shape
outs = y.shape[1]

c = http.InferenceServerClient(url, concurrency=16)
assert c.is_server_live(), "not live"
assert c.is_server_ready(), "not ready"
assert c.is_model_ready(model), "model not ready"
assert not c.is_model_ready("no_such_model"), "an unknown model is ready"
meta = c.get_model_metadata(model)
assert meta["name"] == model, meta
assert meta["versions"] == ["1"], meta
assert meta["inputs"] == [
    {"name": "input__0", "datatype": "FP32", "shape": [-1, features]}], meta
assert meta["outputs"] == [
    {"name": "output__0", "datatype": "FP32", "shape": [-1, outs]}], meta


def an_input(a, binary, name="input__0", datatype="FP32"):
    i = http.InferInput(name, list(a.shape), datatype)
    i.set_data_from_numpy(a, binary_data=binary)
    return i


def infer(a, binary_in, binary_out):
    o = http.InferRequestedOutput("output__0", binary_data=binary_out)
    return c.infer(model, [an_input(a, binary_in)], outputs=[o]).as_numpy("output__0")


def check(got, want, what):
    assert got.dtype == np.float32 and got.shape == want.shape, (what, got.dtype, got.shape)
    if ref["exact"]:
        assert got.tobytes() == want.tobytes(), (what, got, want)
    else:
        diff = float(np.abs(got - want).max())
        assert diff <= ref["tolerance"], (what, diff)


answers = {}
for binary_in in (False, True):
    for binary_out in (False, True):
        what = f"binary input {binary_in}, binary output {binary_out}"
        a = infer(x, binary_in, binary_out)
        check(a, y, what)
        answers[what] = a
first = next(iter(answers.values()))
for what, a in answers.items():
    assert a.tobytes() == first.tobytes(), ("the encodings disagree", what)
# No outputs named: every output, in binary (tritonclient asks for it).
check(c.infer(model, [an_input(x, True)]).as_numpy("output__0"), y, "all outputs")

# Single rows, 16 at a time: the server may batch them; each answer is its
# row's (within 1e-5 of the reference: a batch's rows may round apart).
pending = [(i % rows, c.async_infer(model, [an_input(x[i % rows:i % rows + 1], True)]))
           for i in range(64)]
for r, p in pending:
    got = p.get_result().as_numpy("output__0")
    assert got.shape == (1, outs), got.shape
    diff = float(np.abs(got - y[r:r + 1]).max())
    assert diff <= max(ref.get("tolerance", 0.0), 1e-5), ("row", r, diff)


def refused(f):
    try:
        f()
    except InferenceServerException as e:
        return e.status(), e.message()
    raise AssertionError("no error")


status, message = refused(lambda: c.get_model_metadata("no_such_model"))
assert status == "404" and "no_such_model" in message, (status, message)
status, message = refused(lambda: c.infer("no_such_model", [an_input(x, True)]))
assert status == "404" and "no_such_model" in message, (status, message)
status, message = refused(lambda: c.infer(model, [an_input(x, False, name="input__7")]))
assert status == "400" and "input__7" in message, (status, message)
status, message = refused(
    lambda: c.infer(model, [an_input(x.astype(np.float64), True, datatype="FP64")]))
assert status == "400" and "FP64" in message, (status, message)
status, message = refused(lambda: c.infer(model, [an_input(x[:, :features - 1].copy(), True)]))
assert status == "400" and str(features - 1) in message, (status, message)
# A timeout of 1 µs has passed before any forward: never computed.
status, message = refused(lambda: c.infer(model, [an_input(x, True)], timeout=1))
assert status == "504" and "deadline" in message, (status, message)
c.close()
print("ok")
