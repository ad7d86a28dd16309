"""Writes the small torch.save / safetensors files the f5-torchpt tests read, and the values
they must decode to.

Run from anywhere with the reference environment (torch 2.15, safetensors 0.8):

    python crates/f5-torchpt/tests/data/make.py

Outputs next to this script:
  basic_p2.pt        torch.save(obj)                      (default: zip, pickle protocol 2)
  basic_p4.pt        torch.save(obj, pickle_protocol=4)   (FRAME, SHORT_BINUNICODE, MEMOIZE, ...)
  params.pt          a dict of nn.Parameter objects       (_rebuild_parameter)
  basic.safetensors  the contiguous tensors of obj         (safetensors.torch.save_file)
  module.pt          torch.save(nn.Linear(2, 2))          (must be refused: imports a class)
  evil_os_system.pt  an object whose __reduce__ is os.system(...)  (must be refused)
  evil_eval.pt       an object whose __reduce__ is builtins.eval(...) (must be refused)
  legacy.pt          torch.save(..., _use_new_zipfile_serialization=False) (must be refused;
                     the only output that differs between runs: it embeds storage ids)
  expected.json      for every tensor of basic_*.pt and params.pt: dtype, shape, strides,
                     storage offset and the values as float64 (exact for every dtype used)
The script never loads the evil files back.
"""

import json
import os
from collections import OrderedDict
from pathlib import Path

import torch
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
PWNED = "/tmp/f5-torchpt-pwned"


def build_obj():
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(2, 3, generator=g)
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    sd = OrderedDict()
    sd["f32"] = w
    sd["wt"] = w.t()  # non-contiguous view sharing w's storage
    sd["row1"] = w[1]  # offset view sharing w's storage
    sd["permuted"] = base.permute(2, 0, 1)  # rank-3 strided view
    sd["sliced"] = base[:, 1:, ::2]  # offset + step-2 view
    sd["f16"] = torch.randn(5, generator=g).to(torch.float16)
    sd["bf16"] = torch.randn(2, 2, generator=g).to(torch.bfloat16)
    sd["f64"] = torch.randn(3, generator=g, dtype=torch.float64)
    sd["i64"] = torch.tensor([-(2**40), -1, 0, 7], dtype=torch.int64)
    sd["i32"] = torch.tensor([-5, 100000], dtype=torch.int32)
    sd["i16"] = torch.tensor([-300, 300], dtype=torch.int16)
    sd["i8"] = torch.tensor([-128, 127], dtype=torch.int8)
    sd["u8"] = torch.tensor([0, 255], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.zeros(0, 4)
    return {
        "model": sd,
        "nested": {"inner": {"x": torch.linspace(0, 1, 5)}},
        "step": 1250000,
        "lr": 1e-4,
        "name": "tiny",
        "flag": True,
        "nothing": None,
    }


def flatten(obj, prefix=""):
    out = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, torch.Tensor):
            out[name] = value
    return out


def describe(tensors):
    desc = {}
    for name, t in tensors.items():
        desc[name] = {
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "strides": list(t.stride()),
            "storage_offset": t.storage_offset(),
            "values": t.detach().to(torch.float64).reshape(-1).tolist(),
        }
    return desc


class EvilSystem:
    def __reduce__(self):
        return (os.system, (f"touch {PWNED}",))


class EvilEval:
    def __reduce__(self):
        return (eval, (f"__import__('os').system('touch {PWNED}')",))


def main():
    torch.manual_seed(0)
    obj = build_obj()
    torch.save(obj, HERE / "basic_p2.pt")
    torch.save(obj, HERE / "basic_p4.pt", pickle_protocol=4)

    params = {
        "layer.weight": torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(3, 2)),
        "layer.bias": torch.nn.Parameter(torch.tensor([0.5, -0.5, 1.5]), requires_grad=False),
    }
    torch.save(params, HERE / "params.pt")

    contiguous = {k: v.contiguous().clone() for k, v in flatten(obj).items()}
    save_file(contiguous, str(HERE / "basic.safetensors"))

    torch.manual_seed(0)
    torch.save(torch.nn.Linear(2, 2), HERE / "module.pt")
    torch.save({"weight": torch.arange(4.0), "payload": EvilSystem()}, HERE / "evil_os_system.pt")
    torch.save({"payload": EvilEval()}, HERE / "evil_eval.pt")
    torch.save({"w": torch.ones(2)}, HERE / "legacy.pt", _use_new_zipfile_serialization=False)

    expected = {
        "basic": describe(flatten(obj)),
        "scalars": {"step": obj["step"], "lr": obj["lr"], "name": obj["name"], "flag": obj["flag"]},
        "params": describe({k: v.detach() for k, v in params.items()}),
        "torch": torch.__version__,
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
