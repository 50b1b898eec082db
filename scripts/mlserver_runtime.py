"""A TorchScript model served by MLServer (Seldon's server) as a PyTorch user
would write its custom runtime: `mlserver.MLModel` with `load` and
`predict`, the model loaded with torch.jit.load in eval mode, the forward
under torch.inference_mode(), one intra-op thread per parallel worker (as
scripts/serve_fastapi.py runs each uvicorn worker). MLServer's adaptive
batching hands `predict` the rows of several requests as one input and
splits the output back.

`make load` (examples/load.rs `--servers mlserver`, docs/serving.md)
writes the settings into a temporary folder and runs `mlserver start` from
the venv of scripts/bootstrap-mlserver.sh, with this folder on PYTHONPATH:

    model-settings.json  {"name": ..., "implementation":
                          "mlserver_runtime.TorchScriptRuntime",
                          "parameters": {"uri": "/path/model.pt"},
                          "max_batch_size": 32, "max_batch_time": 0.002,
                          "inputs": [{"name": "input__0", "datatype": "FP32",
                                      "shape": [-1, 1024]}], ...}

Input `input__0`, output `output__0` (Triton's PyTorch-backend names, as
the tch-scope server's Open Inference Protocol routes use).
"""

import torch
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class TorchScriptRuntime(MLModel):
    """One TorchScript model; FP32 in, FP32 out."""

    async def load(self) -> bool:
        torch.set_num_threads(1)
        uri = await get_model_uri(self._settings)
        self._model = torch.jit.load(uri, map_location="cpu").eval()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        if len(payload.inputs) != 1:
            raise ValueError(f"one input expected, got {len(payload.inputs)}")
        x = torch.from_numpy(NumpyCodec.decode_input(payload.inputs[0]))
        with torch.inference_mode():
            y = self._model(x)
        out = NumpyCodec.encode_output(name="output__0", payload=y.numpy())
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=[out])
