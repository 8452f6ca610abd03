"""Lesson code that more than one folder shows: written once here, a region each page includes.

    register_onnx_symbolic/ teaches `threshold_schema` (step 2) and `deform_conv2d_symbolic`
    (step 11); register_pytorch_op/ teaches `dual_residual_symbolic` (step 5). dynamic_shapes/
    and deploy_rknn/ export the same nodes: their pages include the same regions
    (`<!-- {{{cog include("lesson_code.py:NAME") }}} -->`), their test.py imports the names from
    here. run_stacks.py counts this file among the inputs of each folder whose test.py imports it.
"""

from __future__ import annotations

import onnxscript
from onnx.defs import OpSchema
from torch.onnx.symbolic_helper import parse_args

rknn_cst = onnxscript.values.Opset("rknn_cst", 1)  # each page writes this line before the region


# region threshold_schema
# The op's ONNX schema, kept local: the translation types its node with it; onnx never sees it.
threshold_schema = OpSchema(
    "cstThreshold",
    "rknn_cst",
    1,
    inputs=[OpSchema.FormalParameter("X", "T")],
    outputs=[OpSchema.FormalParameter("Y", "T")],
    type_constraints=[("T", ["tensor(float)"], "float32 tensors")],
    attributes=[
        OpSchema.Attribute("threshold", OpSchema.AttrType.FLOAT, "x <= this gives value"),
        OpSchema.Attribute("value", OpSchema.AttrType.FLOAT, "given where x <= threshold"),
    ],
)
cst_threshold = onnxscript.values.Op(rknn_cst, "cstThreshold", threshold_schema)
# endregion


# region dual_residual_symbolic
@parse_args("v", "v", "f")
def dual_residual_symbolic(g, x, y, alpha):
    # outputs=2: g.op returns one Value per output; give each its type (ONNX cannot infer it)
    out_x, out_y = g.op("rknn_cst::cstDualResidual", x, y, alpha_f=alpha, outputs=2)
    out_x.setType(x.type())
    out_y.setType(y.type())
    return out_x, out_y
# endregion


# region deform_conv2d_symbolic
@parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "b")
def deform_conv2d_symbolic(
    g, x, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    groups, offset_groups, use_mask,
):
    # ONNX DeformConv (opset 19) takes X, W, offset, B, mask: not torchvision's order.
    inputs = [x, weight, offset, bias] + ([mask] if use_mask else [])
    return g.op(
        "DeformConv",
        *inputs,
        strides_i=[stride_h, stride_w],
        pads_i=[pad_h, pad_w, pad_h, pad_w],  # ONNX lists begins then ends
        dilations_i=[dil_h, dil_w],
        group_i=groups,
        offset_group_i=offset_groups,
    )
# endregion
