"""The top README's recipe: a Python op with a dynamic batch, exported by both exporters as one
custom node, run in ONNX Runtime with a Python kernel and compared with PyTorch.

Run: python recipe.py (in any folder: it writes two models there). The README shows its regions.
"""

# region recipe_op
import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
from torch.onnx.symbolic_helper import parse_args


@torch.library.custom_op("demo::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


scaled_tanh.register_fake(lambda x, scale: torch.empty_like(x))  # sizes, for torch.export


class Model(torch.nn.Module):
    def forward(self, x):
        return scaled_tanh(x, 2.0) + 1
# endregion


def main():
    # region recipe_dynamo
    schema = onnx.defs.OpSchema(  # the node's contract, local: not registered with ONNX
        "ScaledTanh", "demo", 1,
        inputs=[onnx.defs.OpSchema.FormalParameter("x", "tensor(float)")],
        outputs=[onnx.defs.OpSchema.FormalParameter("y", "tensor(float)")],
        attributes=[onnx.defs.OpSchema.Attribute("scale", onnx.defs.OpSchema.AttrType.FLOAT)],
    )
    ScaledTanh = onnxscript.values.Op(onnxscript.values.Opset("demo", 1), "ScaledTanh", schema)
    translation = {torch.ops.demo.scaled_tanh.default: lambda x, s: ScaledTanh(x, scale=s)}
    program = torch.onnx.export(
        Model().eval(), (torch.randn(2, 8),), dynamo=True, verbose=False,
        dynamic_shapes=({0: torch.export.Dim("batch")},), custom_translation_table=translation,
    )
    program.save("scaled_tanh_dynamo.onnx")
    # endregion

    # region recipe_torchscript
    @parse_args("v", "f")  # x a value, scale a Python float
    def scaled_tanh_symbolic(g, x, scale):
        return g.op("demo::ScaledTanh", x, scale_f=scale).setType(x.type())

    # the last argument: the first ONNX opset the symbolic serves
    torch.onnx.register_custom_op_symbolic("demo::scaled_tanh", scaled_tanh_symbolic, 1)
    torch.onnx.export(
        Model().eval(), (torch.randn(2, 8),), "scaled_tanh_torchscript.onnx", dynamo=False,
        input_names=["x"], dynamic_axes={"x": {0: "batch"}},
    )
    # endregion

    # region recipe_run
    @onnx_op(op_type="demo::ScaledTanh", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float], attrs={"scale": PyCustomOpDef.dt_float})
    def scaled_tanh_kernel(x, scale):
        return np.tanh(x) * np.float32(scale)

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    for path in ("scaled_tanh_dynamo.onnx", "scaled_tanh_torchscript.onnx"):
        onnx.checker.check_model(path, full_check=True)
        ops = [f"{node.domain}.{node.op_type}" for node in onnx.load(path).graph.node]
        assert ops.count("demo.ScaledTanh") == 1, ops
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        for batch in (1, 5):
            x = torch.randn(batch, 8)
            (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
            np.testing.assert_allclose(y, Model()(x).numpy(), rtol=1e-6, atol=1e-6)
        print(f"{path}: one demo.ScaledTanh node, matches PyTorch at batch 1 and 5")
    # endregion


if __name__ == "__main__":
    main()
