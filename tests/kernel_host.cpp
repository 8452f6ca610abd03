// kernel_host: a custom op's own has_evaluate() and evaluate(), called on tensors of one element
// type, with no plugin in between: the f16 and bf16 code paths a CPU without f16 or bf16 hardware
// never takes. tests/test_deploy_openvino.py compiles and runs it.
//
//   kernel_host LIBRARY MODEL TYPE IN OUT
//     LIBRARY  a kernel library (libcst_ops.so); MODEL an f32 ONNX model with one rknn_cst node
//     TYPE     f32, f16 or bf16: the element type to hand the op
//     IN       the op's inputs' raw bytes in TYPE, one input after another (the model's shapes)
//   prints "has_evaluate 0|1 evaluate 0|1"; writes the outputs' raw bytes to OUT, one after
//   another, when evaluate() returned true.
#include <openvino/op/parameter.hpp>
#include <openvino/runtime/core.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s LIBRARY MODEL f32|f16|bf16 IN OUT\n", argv[0]);
        return 2;
    }
    ov::Core core;
    core.add_extension(argv[1]);  // the ops and their ONNX conversions
    const auto model = core.read_model(argv[2]);
    std::shared_ptr<ov::Node> node;  // the custom node: OPENVINO_OP(..., "rknn_cst")
    for (const auto& op : model->get_ops()) {
        const char* opset = op->get_type_info().version_id;
        if (opset && std::strcmp(opset, "rknn_cst") == 0) node = op;
    }
    if (!node) {
        std::fprintf(stderr, "%s: no rknn_cst node\n", argv[2]);
        return 2;
    }

    // A copy of the node on Parameters of TYPE, of the model's shapes: its own
    // validate_and_infer_types() gives its outputs TYPE too.
    const ov::element::Type type(argv[3]);
    ov::OutputVector args;
    for (size_t i = 0; i < node->get_input_size(); ++i)
        args.push_back(std::make_shared<ov::op::v0::Parameter>(type, node->get_input_shape(i)));
    const auto typed = node->clone_with_new_inputs(args);

    // Its inputs, from IN's bytes; its outputs, of the types and shapes the op gave them.
    std::ifstream in(argv[4], std::ios::binary);
    ov::TensorVector inputs, outputs;
    for (size_t i = 0; i < typed->get_input_size(); ++i) {
        inputs.emplace_back(type, typed->get_input_shape(i));
        in.read(static_cast<char*>(inputs.back().data()), inputs.back().get_byte_size());
    }
    if (!in || in.peek() != EOF) {
        std::fprintf(stderr, "%s: not the inputs' size in %s\n", argv[4], type.get_type_name().c_str());
        return 2;
    }
    for (size_t i = 0; i < typed->get_output_size(); ++i)
        outputs.emplace_back(typed->get_output_element_type(i), typed->get_output_shape(i));

    // The kernel itself: what the CPU plugin calls (a "Reference" layer) with TYPE's tensors.
    const bool has_evaluate = typed->has_evaluate();
    const bool evaluated = typed->evaluate(outputs, inputs);
    std::printf("has_evaluate %d evaluate %d\n", has_evaluate, evaluated);
    if (evaluated) {
        std::ofstream out(argv[5], std::ios::binary);
        for (const auto& output : outputs)
            out.write(static_cast<const char*>(output.data()), output.get_byte_size());
    }
    return 0;
}
