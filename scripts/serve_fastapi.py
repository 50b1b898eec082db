"""The same model as examples/serve.rs, served the way Python users serve it:
FastAPI on uvicorn (uvloop, httptools), `uvicorn --workers N` processes,
the TorchScript model loaded with torch.jit.load in each, eval mode,
torch.inference_mode() around the forward, one intra-op thread per worker.
`make load` starts it beside the Rust servers (examples/load.rs
`--servers fastapi`) and drives it with the same requests on the same
connections (docs/serving.md). Installed by scripts/bootstrap-fastapi.sh.

    python scripts/serve_fastapi.py --model M.pt [--addr 127.0.0.1:0]
        [--workers 2] [--body-limit BYTES] [--deadline-ms MS]

The first line on stdout names the address (`listening on http://HOST:PORT`),
as the Rust server's does. The API is serve's: POST /predict
{"shape": [n, ...], "data": [...]} -> {"shape": [...], "data": [...]};
`x-deadline-ms` is the request's budget, checked before the forward (504);
data that does not fit the shape, or a body over the limit, 400; an input
the model refuses, 422.
"""

import argparse
import os
import socket
import sys
import time
from contextlib import asynccontextmanager

ENV = "TCH_SCOPE_FASTAPI_"


def settings():
    return {
        "model": os.environ[ENV + "MODEL"],
        "body_limit": int(os.environ[ENV + "BODY_LIMIT"]),
        "deadline_ms": int(os.environ[ENV + "DEADLINE_MS"]),
    }


def build_app():
    import torch
    from fastapi import FastAPI, Header, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel

    conf = settings()

    @asynccontextmanager
    async def lifespan(app):
        torch.set_num_threads(1)
        model = torch.jit.load(conf["model"]).eval()
        app.state.model = model
        yield

    app = FastAPI(lifespan=lifespan)

    class Body(BaseModel):
        shape: list[int]
        data: list[float]

    def error(status, message):
        return JSONResponse({"error": message}, status_code=status)

    # A plain `def`: FastAPI runs it on its thread pool, as a blocking
    # forward should be run; torch lets go of the GIL while it computes.
    @app.post("/predict")
    def predict(
        body: Body,
        request: Request,
        x_deadline_ms: int | None = Header(default=None),
    ):
        arrival = time.monotonic()
        length = int(request.headers.get("content-length") or 0)
        if length > conf["body_limit"]:
            return error(400, f"request body over the limit of {conf['body_limit']} bytes")
        n = 1
        for d in body.shape:
            if d < 0:
                return error(400, "a negative dim in `shape`")
            n *= d
        if n != len(body.data):
            return error(400, f"`data` has {len(body.data)} values, `shape` needs {n}")
        budget = conf["deadline_ms"] if x_deadline_ms is None else x_deadline_ms
        if time.monotonic() - arrival >= budget / 1000:
            return error(504, "deadline passed before the forward")
        x = torch.tensor(body.data, dtype=torch.float32).view(body.shape)
        try:
            with torch.inference_mode():
                y = request.app.state.model(x)
        except RuntimeError as e:
            return error(422, str(e))
        return {"shape": list(y.shape), "data": y.reshape(-1).tolist()}

    return app


if __name__ != "__main__":
    # Imported by each uvicorn worker (`serve_fastapi:app`).
    app = build_app()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--addr", default="127.0.0.1:0")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--body-limit", type=int, default=1 << 20)
    ap.add_argument("--deadline-ms", type=int, default=10_000)
    a = ap.parse_args()
    host, _, port = a.addr.rpartition(":")
    # Bound here, so port 0 works and the address is known before the
    # workers start; they accept on this socket (uvicorn's --fd).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(2048)
    sock.set_inheritable(True)
    os.environ[ENV + "MODEL"] = os.path.abspath(a.model)
    os.environ[ENV + "BODY_LIMIT"] = str(a.body_limit)
    os.environ[ENV + "DEADLINE_MS"] = str(a.deadline_ms)
    h, p = sock.getsockname()
    print(f"listening on http://{h}:{p}", flush=True)
    import uvicorn

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    uvicorn.run(
        "serve_fastapi:app",
        fd=sock.fileno(),
        workers=a.workers,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
