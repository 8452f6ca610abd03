"""One place for every torch.autograd.Function's ONNX: a custom_translation_table, and the
legacy prim::PythonOp symbolic it replaces.

Run: python test.py [--out DIR] [-v]

dynamo=True (the default): torch.export records what each Function's forward calls. To choose the
ops, each Function becomes a torch.library custom op (checked by torch.library.opcheck; a library's
Function, by patching its class's apply), and one custom_translation_table holds the translations;
assert_onnx_program checks each program. dynamo=False (the TorchScript-based exporter, deprecated):
a Function that is not inlined becomes a `prim::PythonOp` node, and one function registered for
`prim::PythonOp` translates them all, choosing by the Function's name and arguments; under
dynamo=True that registration is never called. Every python block of README.md is in this file;
the lines around them are the checks.
"""

import pathlib
import sys
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's harness.py
import harness  # the runner: the command line, the steps, the checks (harness.py)
from page_helpers import *  # noqa: F403 - the page's first block: common imports, helpers

# The page's imports, then its helpers, word for word (a pasted page starts with them) ---------

# region imports
from onnxscript import FLOAT
from onnxscript import opset18 as op
# endregion


def check_dynamo_opsets(*paths):
    """Each dynamo=True model is at the exporter's default opset: 18 before torch 2.9, 20 since."""
    if unoptimized():
        harness.differs("opset 18, and export does not optimize: constants stay Constant nodes")
    elif harness.TORCH < (2, 9):
        harness.differs("the models are at opset 18, dynamo=True's default before 2.9")
    first = harness.opsets_of(onnx.load(paths[0]))
    assert first[""] == (18 if harness.TORCH < (2, 9) else 20), first
    for path in paths[1:]:
        assert harness.opsets_of(onnx.load(path)) == first, path


def unoptimized() -> bool:
    """torch 2.5 and 2.6 export with optimize=False (their default, torch/onnx/__init__.py; True from 2.7):
    no constant folding, so each Python number stays a Constant node (and a CastLike)."""
    return harness.TORCH < (2, 7)  # check_dynamo_opsets() says so in the step's differs


# ---------------------------------------------------------------------------------------------
# 1. dynamo=True: each Function's forward, recorded
# ---------------------------------------------------------------------------------------------


# region MyClip
class MyClip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, min):
        ctx.save_for_backward(input)
        return input.clamp(min=min)


class MyRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)


class ClipThenRelu(torch.nn.Module):
    def forward(self, x):
        return MyRelu.apply(MyClip.apply(x, -0.5))


class TwoClips(torch.nn.Module):
    def forward(self, x):
        return MyClip.apply(x, 0.0) + MyClip.apply(x, 0.5)
# endregion


@harness.needs_torch("2.5", "on 2.4, dynamo=True is the older torch.onnx.dynamo_export")
def step1_dynamo_records_forward():
    """dynamo=True: each Function's forward, recorded"""
    # region step1
    x = torch.randn(2, 3)
    for model, path in [
        (ClipThenRelu().eval(), "clip_then_relu_dynamo.onnx"),
        (TwoClips().eval(), "two_clips_dynamo.onnx"),
    ]:
        onnx_program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
        assert_onnx_program(onnx_program, rtol=0, atol=0)  # ONNX Runtime vs PyTorch, exactly
        onnx_program.save(path)
        ops = [node.op_type for node in onnx.load(path).graph.node]
        print(f"  {path}: matches PyTorch exactly; ops {' '.join(ops)}")
    # endregion
    for path in ("clip_then_relu_dynamo.onnx", "two_clips_dynamo.onnx"):
        harness.show(path)
    clip_then_relu = harness.op_types("clip_then_relu_dynamo.onnx")
    two_clips = harness.op_types("two_clips_dynamo.onnx")
    if unoptimized():  # each clamp's Python min: a Constant, and a CastLike or Cast
        assert clip_then_relu == ["Constant", "CastLike", "Clip", "Constant", "Cast", "Max"]
        assert two_clips == [*["Constant", "CastLike", "Clip"] * 2, "Add"], two_clips
    else:
        assert clip_then_relu == ["Clip", "Max"], clip_then_relu
        assert two_clips == ["Clip", "Clip", "Add"], two_clips
    check_dynamo_opsets("clip_then_relu_dynamo.onnx", "two_clips_dynamo.onnx")


# ---------------------------------------------------------------------------------------------
# 2. dynamo=True: custom ops and one custom_translation_table
# ---------------------------------------------------------------------------------------------


# region my_clip_translation
def my_clip_translation(x, min: float):
    if min == 0:  # clamp(min=0) is a Relu: chosen in Python, while translating
        return op.Relu(x)
    return op.Clip(x, op.CastLike(min, x))


def my_relu_translation(x):
    return op.Relu(x)
# endregion


if hasattr(torch.library, "custom_op"):  # torch.library.custom_op came with torch 2.4
    # region my_clip
    # Each Function as a custom op: a schema (from the type hints), a kernel, and a fake kernel.
    @torch.library.custom_op("pythonop_demo::my_clip", mutates_args=())
    def my_clip(x: torch.Tensor, min: float) -> torch.Tensor:
        return x.clamp(min=min)


    @torch.library.custom_op("pythonop_demo::my_relu", mutates_args=())
    def my_relu(x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)


    # torch.export traces on fake tensors: say what comes out, without computing it.
    my_clip.register_fake(lambda x, min: torch.empty_like(x))
    my_relu.register_fake(lambda x: torch.empty_like(x))

    # One table for all the custom ops: what one prim::PythonOp symbolic is under dynamo=False.
    translations = {
        torch.ops.pythonop_demo.my_clip.default: my_clip_translation,
        torch.ops.pythonop_demo.my_relu.default: my_relu_translation,
    }
    # endregion


@harness.needs_torch("2.6", harness.TABLE)
def step2_custom_ops():
    """dynamo=True: custom ops and one custom_translation_table"""
    # region step2
    # opcheck tests each fake kernel (and schema) against the real op; it raises on a mismatch.
    x = torch.randn(2, 3)
    print("  opcheck my_clip:", set(torch.library.opcheck(my_clip, (x, -0.5)).values()))
    print("  opcheck my_relu:", set(torch.library.opcheck(my_relu, (x,)).values()))
    # endregion

    # region CustomOpModel
    class CustomOpModel(torch.nn.Module):
        def forward(self, x, y):
            return my_relu(x) + my_clip(y, 0.0) + my_clip(y, 0.5)

    model = CustomOpModel().eval()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with expect_error("No ONNX function found for <OpOverload(op='pythonop_demo.my_relu'"):
        torch.onnx.export(model, (x, y), dynamo=True, verbose=False)
    onnx_program = torch.onnx.export(
        model, (x, y), dynamo=True, verbose=False, custom_translation_table=translations
    )
    assert_onnx_program(onnx_program, rtol=0, atol=0)
    onnx_program.save("custom_ops_dynamo.onnx")
    ops = [node.op_type for node in onnx.load("custom_ops_dynamo.onnx").graph.node]
    print(f"  custom_ops_dynamo.onnx: matches PyTorch exactly; ops {' '.join(ops)}")
    # endregion

    harness.show("custom_ops_dynamo.onnx")
    expected = ["Add", "Add", "Clip", "Relu", "Relu"]  # my_clip(y, 0.0): a Relu
    if unoptimized():  # my_clip(y, 0.5)'s CastLike(0.5, y): a Constant and a CastLike
        expected = ["Add", "Add", "CastLike", "Clip", "Constant", "Relu", "Relu"]
    assert sorted(ops) == expected, ops
    check_dynamo_opsets("clip_then_relu_dynamo.onnx", "custom_ops_dynamo.onnx")


# ---------------------------------------------------------------------------------------------
# 3. dynamo=True: a library's Functions, by patching apply
# ---------------------------------------------------------------------------------------------


# region custom_op_apply
@contextlib.contextmanager
def custom_op_apply():
    """While the block runs, each class's apply calls its custom op; after it, even when the
    export raises, `del` gives the class its own apply back."""
    MyClip.apply = torch.ops.pythonop_demo.my_clip
    MyRelu.apply = torch.ops.pythonop_demo.my_relu
    try:
        yield
    finally:
        del MyClip.apply, MyRelu.apply
# endregion


@harness.needs_torch("2.6", harness.TABLE)
def step3_patched_apply():
    """dynamo=True: a library's Functions, by patching apply"""
    x = torch.randn(2, 3)  # step 2's input
    # region step3
    model = ClipThenRelu().eval()  # step 1's model, its code unchanged
    with custom_op_apply():
        onnx_program = torch.onnx.export(
            model, (x,), dynamo=True, verbose=False, custom_translation_table=translations
        )
    assert_onnx_program(onnx_program, rtol=0, atol=0)
    onnx_program.save("patched_functions_dynamo.onnx")
    ops = [node.op_type for node in onnx.load("patched_functions_dynamo.onnx").graph.node]
    print(f"  patched_functions_dynamo.onnx: matches PyTorch exactly; ops {' '.join(ops)}")
    # endregion

    harness.show("patched_functions_dynamo.onnx")
    assert "apply" not in vars(MyClip) and "apply" not in vars(MyRelu), "the patch outlived it"
    if unoptimized():  # my_clip's Clip and my_relu's Relu, as translated
        assert ops == ["Constant", "CastLike", "Clip", "Relu"], ops
    else:  # my_clip's Clip and my_relu's Relu, folded into one Clip by the exporter's optimizer
        assert ops == ["Clip"], ops
    check_dynamo_opsets("clip_then_relu_dynamo.onnx", "patched_functions_dynamo.onnx")


# ---------------------------------------------------------------------------------------------
# 4. dynamo=False: without any symbolic
# ---------------------------------------------------------------------------------------------


def step4_without_symbolic():
    """dynamo=False: Functions without a symbolic"""
    with warnings.catch_warnings(record=True) as caught:  # torch's deprecation warning, below
        warnings.simplefilter("always")
        # region step4
        model = ClipThenRelu().eval()
        x = torch.randn(2, 3)
        # By default the TorchScript-based exporter inlines each Function's forward.
        torch.onnx.export(
            model, (x,), "inlined.onnx", dynamo=False, opset_version=17, input_names=["x"],
            output_names=["y"],
        )
        (actual,) = run_ort("inlined.onnx", {"x": x.numpy()})
        compare("inlined.onnx", actual, model(x), rtol=0, atol=0)
        # endregion
    harness.show("inlined.onnx")
    ops = harness.op_types("inlined.onnx")
    assert ops.count("Clip") == 2 and "Relu" not in ops, ops  # forward's clamps, not MyRelu
    legacy = [str(w.message) for w in caught if "legacy TorchScript" in str(w.message)]
    if harness.TORCH < (2, 9):  # the warning came with 2.8, saying dynamo=True *will be* default
        harness.differs("dynamo=False is the default until 2.9 (2.8 warns so; 2.4 does not warn)")
        assert not legacy or "will be the default" in legacy[0], legacy
    else:
        assert legacy, "torch no longer warns that dynamo=False is the legacy exporter"
        sentences = legacy[0].split(" Learn more")[0].split(". ")
        print("  torch warns:", sentences[0] + ".")
        print("   ", sentences[1])

    # region step4-2
    # autograd_inlining=False keeps each Function as one prim::PythonOp node: with no rule for it,
    # the export fails.
    with expect_error("Couldn't export Python operator MyClip"):
        torch.onnx.export(
            model, (x,), "failures/pythonop_no_symbolic.onnx", dynamo=False, opset_version=17,
            autograd_inlining=False,
        )
    # endregion


# ---------------------------------------------------------------------------------------------
# 5. dynamo=False: one symbolic for prim::PythonOp
# ---------------------------------------------------------------------------------------------


# region symbolic_pythonop
def symbolic_pythonop(g, *args, **kwargs):
    node = g.original_node  # the prim::PythonOp being translated
    name, module = kwargs["name"], kwargs["module"]  # the Function's class and its module
    # args: the Function's forward inputs after ctx: tensors as graph values, scalars as is
    shown = [a.debugName() if isinstance(a, torch._C.Value) else a for a in args]
    print(f"  prim::PythonOp {module}.{name}, args {shown}")
    if name == "MyClip":
        x, min_value = args
        if min_value == 0:  # dispatch on an argument too: clamp(min=0) is a Relu
            result = g.op("Relu", x)
        else:
            bound = torch.tensor(min_value, dtype=x.type().dtype())
            result = g.op("Clip", x, g.op("Constant", value_t=bound))
    elif name == "MyRelu":
        result = g.op("Relu", args[0])
    else:  # a Function this table does not name: say which, in the error
        raise torch.onnx.errors.SymbolicValueError(
            f"symbolic_pythonop: no ONNX translation for autograd.Function {module}.{name}",
            args[0],
        )
    result.setType(node.output().type())  # the output's type and shape, as PyTorch traced them
    return result
# endregion


# region MyTanh
class MyTanh(torch.autograd.Function):  # one that symbolic_pythonop does not know
    @staticmethod
    def forward(ctx, input):
        return torch.tanh(input)


class WithTanh(torch.nn.Module):
    def forward(self, x):
        return MyTanh.apply(MyRelu.apply(x))
# endregion


# region symbolic_pythonop_source
# The torch 1.10 snippet: the exporter passed the node as a second argument `n`.
def symbolic_pythonop_source(g, n, *args, **kwargs):
    name = kwargs["name"]
    if name == "MyClip":
        return g.op("Clip", args[0], min_f=args[1])
    if name == "MyRelu":
        return g.op("Relu", args[0])
    return None
# endregion


def step5_one_symbolic():
    """dynamo=False: one symbolic for prim::PythonOp"""
    model = ClipThenRelu().eval()  # step 4's model and input
    x = torch.randn(2, 3)

    # region step5
    # Registered at opset 1, it serves every opset; no other export option is needed.
    torch.onnx.register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop, 1)
    torch.onnx.export(
        model, (x,), "pythonop.onnx", dynamo=False, opset_version=17, input_names=["x"],
        output_names=["y"],
    )
    (actual,) = run_ort("pythonop.onnx", {"x": x.numpy()})
    compare("pythonop.onnx", actual, model(x), rtol=0, atol=0)
    # endregion
    harness.show("pythonop.onnx")
    assert harness.op_types("pythonop.onnx") == ["Constant", "Clip", "Relu"]

    with harness.quiet():  # the exporter's dump of the graph at the failure (shown with -v)
        # region step5-2
        with expect_error("no ONNX translation for autograd.Function __main__.MyTanh"):
            torch.onnx.export(
                WithTanh(), (x,), "failures/unknown_function.onnx", dynamo=False, opset_version=17
            )
        # endregion

    # region step5-3
    # Under the snippet's name it is filed as aten::prim_PythonOp and never looked up: with no rule
    # for prim::PythonOp (the one above unregistered), the exporter inlines forward: two Clips.
    torch.onnx.unregister_custom_op_symbolic("prim::PythonOp", 1)
    torch.onnx.register_custom_op_symbolic("::prim_PythonOp", symbolic_pythonop_source, 1)
    os.makedirs("failures", exist_ok=True)  # failure demonstrations go there
    torch.onnx.export(
        model, (x,), "failures/pythonop_old_name.onnx", dynamo=False, opset_version=17
    )
    ignored = [node.op_type for node in onnx.load("failures/pythonop_old_name.onnx").graph.node]
    print(f"  '::prim_PythonOp' never called: the model holds {ignored}")
    # endregion
    assert ignored == ["Constant", "Clip", "Constant", "Clip"], ignored

    with harness.quiet():
        # region step5-4
        # Registered as prim::PythonOp it is called as symbolic(g, *args, **kwargs): `n` receives
        # the first tensor and every argument shifts by one, so args[1] does not exist.
        torch.onnx.register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop_source, 1)
        with expect_error("tuple index out of range"):
            torch.onnx.export(
                model, (x,), "failures/pythonop_old_signature.onnx", dynamo=False, opset_version=17
            )
        # endregion

    exists = hasattr(torch.onnx, "SymbolicContext")
    print("  torch.onnx.SymbolicContext exists:", exists)
    if harness.TORCH < (2, 5):  # removed in 2.5 (pytorch/pytorch#132184)
        harness.differs("torch.onnx.SymbolicContext still exists: its form still works here")
    assert exists == (harness.TORCH < (2, 5))


# ---------------------------------------------------------------------------------------------
# 6. dynamo=False: dispatch on more than the name
# ---------------------------------------------------------------------------------------------


def step6_dispatch_on_arguments():
    """dynamo=False: dispatch on arguments: MyClip(x, 0.0) -> Relu, MyClip(x, 0.5) -> Clip"""
    # region step6
    # Registrations are global to the process, and the last one wins: step 5 ended with the
    # torch 1.10 snippet's, so register symbolic_pythonop again.
    torch.onnx.register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop, 1)
    model = TwoClips().eval()
    x = torch.randn(2, 3)
    torch.onnx.export(
        model, (x,), "pythonop_by_argument.onnx", dynamo=False, opset_version=17,
        input_names=["x"], output_names=["y"],
    )
    (actual,) = run_ort("pythonop_by_argument.onnx", {"x": x.numpy()})
    compare("pythonop_by_argument.onnx", actual, model(x), rtol=0, atol=0)
    # endregion
    harness.show("pythonop_by_argument.onnx")
    ops = harness.op_types("pythonop_by_argument.onnx")
    assert ops == ["Relu", "Constant", "Clip", "Add"], ops


# ---------------------------------------------------------------------------------------------
# 7. dynamo=True never calls the prim::PythonOp symbolic
# ---------------------------------------------------------------------------------------------


@harness.needs_torch("2.5", "on 2.4, dynamo=True is the older torch.onnx.dynamo_export")
def step7_dynamo_ignores_the_symbolic():
    """dynamo=True never calls the prim::PythonOp symbolic"""
    model, x = TwoClips().eval(), torch.randn(2, 3)  # step 6's model and input
    # region step7
    # symbolic_pythonop is still registered (step 6), and no line of it prints: no prim::PythonOp.
    onnx_program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    assert_onnx_program(onnx_program, rtol=0, atol=0)
    ops = [node.op_type for node in onnx_program.model_proto.graph.node]
    print(f"  TwoClips, symbolic registered: matches PyTorch exactly; ops {' '.join(ops)}")
    # endregion
    assert "prim::PythonOp" not in harness.printed(), "dynamo=True called the symbolic"
    assert ops == harness.op_types("two_clips_dynamo.onnx"), ops  # what step 1 wrote


# ---------------------------------------------------------------------------------------------
# 8. A float16 or bfloat16 model: the ops between Casts
# ---------------------------------------------------------------------------------------------


# region ReluAndClip
class ReluAndClip(torch.nn.Module):  # two outputs: no Clip and Relu for the optimizer to fold
    def forward(self, x):
        return MyRelu.apply(x), MyClip.apply(x, 0.5)
# endregion


# region float32_translations
# ONNX Runtime's CPU has no bfloat16 Relu (nor Add, Max): each translation computes in float32
# between Casts, back to the model's dtype (CastLike: opset 15 or later).
def my_clip_float32_translation(x, min: float):
    return op.CastLike(my_clip_translation(op.Cast(x, to=FLOAT.dtype), min), x)


def my_relu_float32_translation(x):
    return op.CastLike(my_relu_translation(op.Cast(x, to=FLOAT.dtype)), x)
# endregion


# region symbolic_pythonop_float32
def symbolic_pythonop_float32(g, x, *args, **kwargs):  # the same Casts, for dynamo=False
    x32 = g.op("Cast", x, to_i=onnx.TensorProto.FLOAT)
    x32.setType(x.type().with_dtype(torch.float32))
    y = symbolic_pythonop(g, x32, *args, **kwargs)  # step 5's symbolic, on float32
    y.setType(x.type().with_dtype(torch.float32))  # float32, not the node's own dtype
    return g.op("CastLike", y, x)
# endregion


@harness.needs_torch("2.1", "PyTorch's CPU clamp has no float16 before 2.1 (\"clamp_min_scalar_cpu\" "
                     "not implemented for 'Half', pytorch/pytorch#99563): no reference")
def step8_half_precision():
    """A float16 or bfloat16 model: the ops between Casts"""
    model = ReluAndClip().eval()  # as the region below makes it, for torch < 2.6
    if harness.TORCH < (2, 6):
        harness.differs("dynamo=True's half is not shown: " + harness.TABLE)
    else:
        # region step8
        # Step 2's translations on a bfloat16 model, each Function's apply patched as in step 3.
        model = ReluAndClip().eval()
        x = torch.randn(2, 3).to(torch.bfloat16)
        with custom_op_apply():
            onnx_program = torch.onnx.export(
                model, (x,), dynamo=True, verbose=False, custom_translation_table=translations
            )
        path = "failures/relu_and_clip_bf16_dynamo.onnx"
        onnx_program.save(path)
        onnx.checker.check_model(path, full_check=True)  # ONNX's Relu takes bfloat16: it passes
        ops = [n.op_type for n in onnx.load(path).graph.node]
        print(f"  {path}: {' '.join(ops)}, full check passed")
        with expect_error("Could not find an implementation for"):  # Relu(14); 2.6-2.8: Max(13)
            assert_onnx_program(onnx_program, rtol=0, atol=0)  # a session, right after export
        # endregion

        # region step8-2
        table = {
            torch.ops.pythonop_demo.my_clip.default: my_clip_float32_translation,
            torch.ops.pythonop_demo.my_relu.default: my_relu_float32_translation,
        }
        for dtype in (torch.float16, torch.bfloat16):
            x = torch.randn(2, 3).to(dtype)
            with custom_op_apply():
                onnx_program = torch.onnx.export(
                    model, (x,), dynamo=True, verbose=False, custom_translation_table=table
                )
            path = f"relu_and_clip_{str(dtype)[6:]}_dynamo.onnx"
            onnx_program.save(path)
            onnx.checker.check_model(path, full_check=True)
            actual = run_ort_torch(path, [x])  # torch 2.6's assert_onnx_program takes no bfloat16
            for a, expected in zip(actual, model(x), strict=True):
                assert a.dtype == dtype and torch.equal(a, expected)  # selections: exact
            ops = [n.op_type for n in onnx.load(path).graph.node]
            print(f"  {path}: {' '.join(ops)}, equals PyTorch")
        # endregion
        for dtype in (torch.float16, torch.bfloat16):
            check_half_dynamo(f"relu_and_clip_{str(dtype)[6:]}_dynamo.onnx", dtype)
        assert "apply" not in vars(MyClip) and "apply" not in vars(MyRelu), "the patch outlived it"
        failed = sorted(harness.op_types("failures/relu_and_clip_bf16_dynamo.onnx"))
        if unoptimized():  # the Clip's bound: a Constant and a CastLike
            assert failed == ["CastLike", "Clip", "Constant", "Relu"], failed
        else:
            assert failed == ["Clip", "Relu"], failed

    # region step8-3
    # Registered in place of step 6's symbolic_pythonop (which it calls), for every Function.
    register_custom_op_symbolic("prim::PythonOp", symbolic_pythonop_float32, 1)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(2, 3).to(dtype)
        path = f"relu_and_clip_{str(dtype)[6:]}.onnx"
        torch.onnx.export(
            model, (x,), path, dynamo=False, opset_version=17, input_names=["x"],
            output_names=["relu", "clip"],
        )
        onnx.checker.check_model(path, full_check=True)
        actual = run_ort_torch(path, [x])  # bfloat16 too: numpy has none
        for a, expected in zip(actual, model(x), strict=True):
            assert a.dtype == dtype and torch.equal(a, expected)  # selections: exact
        ops = [n.op_type for n in onnx.load(path).graph.node]
        print(f"  {path}: {' '.join(ops)}, equals PyTorch")
    # endregion
    for dtype in (torch.float16, torch.bfloat16):
        path = f"relu_and_clip_{str(dtype)[6:]}.onnx"
        exported = harness.show(path)
        check_half_ends(exported, dtype)
        ops = harness.op_types(path)
        assert ops == ["Cast", "Relu", "CastLike", "Cast", "Constant", "Clip", "CastLike"], ops
        assert harness.opsets_of(exported) == {"": 17}, exported.opset_import


def check_half_ends(model, dtype):
    """The model's inputs and outputs are in DTYPE; its Relu and Clip take a Cast to float32."""
    elem = {torch.float16: onnx.TensorProto.FLOAT16, torch.bfloat16: onnx.TensorProto.BFLOAT16}
    ends = [*model.graph.input, *model.graph.output]
    assert all(v.type.tensor_type.elem_type == elem[dtype] for v in ends), ends
    made_by = {out: n for n in model.graph.node for out in n.output}
    for node in (n for n in model.graph.node if n.op_type in ("Relu", "Clip")):  # on float32
        cast = made_by.get(node.input[0])
        assert cast is not None and cast.op_type == "Cast", (node.op_type, node.input[0])
        assert cast.attribute[0].i == onnx.TensorProto.FLOAT, cast


def check_half_dynamo(path, dtype):
    """Step 8's dynamo=True files: the model's dtype at both ends, float32 Relu and Clip between."""
    check_half_ends(harness.show(path), dtype)
    ops = harness.op_types(path)
    if unoptimized():  # CastLike stays, the Clip's bound a Constant with its CastLike
        assert sorted(ops) == sorted(["Cast", "Relu", "CastLike", "Cast", "Constant", "CastLike",
                                      "Clip", "CastLike"]), ops
    else:  # the optimizer shares the one Cast of x and makes each CastLike a Cast
        assert ops == ["Cast", "Relu", "Cast", "Clip", "Cast"], ops
    check_dynamo_opsets("clip_then_relu_dynamo.onnx", path)


# ---------------------------------------------------------------------------------------------

KEPT = {  # what each step writes and claims valid; failure demonstrations below
    1: ("clip_then_relu_dynamo.onnx", "two_clips_dynamo.onnx"),
    2: ("custom_ops_dynamo.onnx",),
    3: ("patched_functions_dynamo.onnx",),
    4: ("inlined.onnx",),
    5: ("pythonop.onnx",),
    6: ("pythonop_by_argument.onnx",),
    8: ("relu_and_clip_float16_dynamo.onnx", "relu_and_clip_bfloat16_dynamo.onnx",
        "relu_and_clip_float16.onnx", "relu_and_clip_bfloat16.onnx"),
}
if harness.TORCH < (2, 6):  # step 8 writes its dynamo=True files from 2.6 on (custom_translation_table)
    KEPT[8] = tuple(m for m in KEPT[8] if not m.endswith("_dynamo.onnx"))
FAILURES = (  # the exports that fail write nothing
    "failures/pythonop_no_symbolic.onnx",
    "failures/unknown_function.onnx",
    "failures/pythonop_old_name.onnx",
    "failures/pythonop_old_signature.onnx",
    "failures/relu_and_clip_bf16_dynamo.onnx",  # step 8: bfloat16 Relu, refused by ONNX Runtime
)
# For ERRORS.md: part of each reproduced error -> (what raises it, its cause[, fixing step])
CAUSES = {
    "No ONNX function found for <OpOverload(op='pythonop_demo.my_relu'": (
        "dynamo=True",
        "the custom op has no ONNX translation: `dynamo=True` ignores symbolics; give it a "
        "`custom_translation_table` entry",
    ),
    "Couldn't export Python operator MyClip": (
        "dynamo=False",
        "a `torch.autograd.Function` kept as one `prim::PythonOp` node (by the deprecated "
        "`autograd_inlining=False`, or on torch < 1.13) with no `symbolic` method and no "
        "`prim::PythonOp` rule; or give the Function a `symbolic` "
        "([`autograd_function/` step 5](autograd_function/README.md#5-dynamofalse-myrelu---clip-from-symbolic))",
        5,  # fixed in step 5
    ),
    "tuple index out of range": (
        "dynamo=False",
        "a torch 1.x `symbolic_pythonop(g, n, *args, **kwargs)`: the exporter now calls it "
        "without `n`, so every argument shifts by one",
    ),
    "no ONNX translation for autograd.Function": (
        "dynamo=False",
        "the `prim::PythonOp` symbolic's own error for a Function its table does not name: add "
        "the Function to the table",
    ),
    "Could not find an implementation for Relu(14)": (
        "ONNX Runtime",
        "ONNX allows a bfloat16 `Relu` (the full checker passes), but ONNX Runtime's CPU provider "
        "has no bfloat16 `Relu` kernel (nor `Add`, `Max`): compute in float32 between Casts",
        8,
    ),
    "Could not find an implementation for Max(13)": (
        "ONNX Runtime",
        "the same on torch 2.6 to 2.8 (opset 18): the bfloat16 node ONNX Runtime names is a `Max` "
        "it made itself (the node has no name); no CPU kernel for it either",
        8,
    ),
}


def main(argv: list[str] | None = None) -> int:
    return harness.run(__file__, globals(), kept=KEPT, failures=FAILURES, causes=CAUSES, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
