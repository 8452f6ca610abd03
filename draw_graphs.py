"""Draw an ONNX model's graph as a Mermaid flowchart, and keep the pictures in the READMEs in step with the models.

    python draw_graphs.py MODEL.onnx                   print the picture of one model
    python draw_graphs.py --write [FOLDER ...]         redraw the pictures in FOLDER/README.md and README.zh-CN.md
    python draw_graphs.py --check [FOLDER ...]         exit 1, naming them, if a picture differs from its model

A README marks a picture with a comment line `<!-- graph: NAME.onnx -->` directly followed by a ```mermaid block;
the block is drawn from the model NAME.onnx that the folder's test.py writes. --write and --check run nothing: they
read the models from `--models DIR` (default `FOLDER/output`, where `python FOLDER/test.py` writes them; `{folder}`
in DIR stands for the folder's name). The drawing is deterministic: the same model always gives the same text.

What a picture shows: the graph inputs and outputs (name and type), one box per node (`domain.OpType`, with the
domain left out for standard ONNX ops, and its attributes), Constant nodes and initializers folded into the label of
the node that uses them (`in1 = 0.5`), tensor names on the edges out of a node with several outputs, and the body of
every function the model defines, as a `subgraph` linked to the nodes that call it.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent
PICTURE = re.compile(
    r"^<!-- graph: (?P<model>[^\s>]+\.onnx) -->\n\n```mermaid\n(?P<body>.*?)^```$", re.S | re.M
)
STANDARD_DOMAINS = ("", "ai.onnx")
SIDEWAYS = 5  # a graph with more edges than this (or with functions) is drawn top to bottom
MAX_VALUES = 4  # a folded constant with more elements than this is drawn as its type and shape
GENERATED_DIM = re.compile(r"^\w+_dim_\d+$")  # the exporter's made-up name for an unknown dimension
GENERATED_NAME = re.compile(
    r"^(/.*|\d+|.*_output_\d+|val_\d+|tmp(_\d+)?)$"
)  # a tensor name that says nothing


def escape(text: str) -> str:
    """Text safe inside a quoted Mermaid label."""
    return (
        text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    )


def number(value: float) -> str:
    return str(np.float32(value)) if isinstance(value, float) else str(value)


def values_text(array: np.ndarray) -> str:
    """A constant's value: the number itself, a short list, or its type and shape."""
    dtype = "bool" if array.dtype == bool else array.dtype.name
    if array.size > MAX_VALUES or array.size == 0:
        return f"{dtype}[{'x'.join(str(d) for d in array.shape)}]"
    items = [number(v) for v in array.reshape(-1).tolist()]
    if array.ndim == 0:
        return items[0]
    return "[" + ", ".join(items) + "]"


def attribute_text(attribute: onnx.AttributeProto) -> str:
    if attribute.ref_attr_name:
        return f"{attribute.name}=@{attribute.ref_attr_name}"
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
    elif isinstance(value, onnx.TensorProto):
        text = values_text(numpy_helper.to_array(value))
    elif isinstance(value, onnx.GraphProto):
        text = f"graph {value.name}"
    elif isinstance(value, list):
        if len(value) > MAX_VALUES:
            text = f"[{len(value)} values]"
        else:
            text = (
                "["
                + ", ".join(v.decode() if isinstance(v, bytes) else number(v) for v in value)
                + "]"
            )
    else:
        text = number(value)
    return f"{attribute.name}={text}"


def type_text(value_type: onnx.TypeProto) -> str:
    if not value_type.HasField("tensor_type"):
        return value_type.WhichOneof("value") or ""
    tensor = value_type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
    if not tensor.HasField("shape"):
        return dtype
    dims = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(str(dim.dim_value))
        elif dim.dim_param and not GENERATED_DIM.match(dim.dim_param):
            dims.append(dim.dim_param)
        else:
            dims.append("?")
    return f"{dtype}[{'x'.join(dims)}]"


def op_name(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in STANDARD_DOMAINS else f"{node.domain}.{node.op_type}"


class Drawing:
    """Mermaid lines for one graph or function body; ids are unique across the whole picture."""

    def __init__(self, lines: list[str], prefix: str, indent: str = "    "):
        self.lines, self.prefix, self.indent = lines, prefix, indent

    def draw(
        self, inputs, outputs, nodes, constants: dict[str, str], functions: dict
    ) -> list[tuple[str, tuple]]:
        """Draw the boxes and edges; return (node id, function key) for every node that calls a function."""
        p, say = self.prefix, self.lines.append
        producer: dict[
            str, tuple[str, int, int]
        ] = {}  # tensor -> (box, output index, number of box's outputs)
        for index, (name, text) in enumerate(inputs):
            label = f"{name}: {text}" if text else name
            say(f'{self.indent}{p}i{index}(["{escape(label)}"])')
            producer[name] = (f"{p}i{index}", 0, 0)  # 0 outputs: a graph input
        used = {name for node in nodes for name in node.input}
        folded = {}  # Constant nodes drawn inside their consumers
        for node in nodes:
            if (
                node.op_type == "Constant"
                and node.domain in STANDARD_DOMAINS
                and len(node.attribute) == 1
            ):
                if node.output[0] in used and node.output[0] not in {name for name, _ in outputs}:
                    folded[node.output[0]] = attribute_text(node.attribute[0]).split("=", 1)[1]
        constants = {**constants, **folded}
        calls = []
        for index, node in enumerate(nodes):
            if node.output and node.output[0] in folded:
                continue
            box = f"{p}n{index}"
            label = [op_name(node)] + [attribute_text(a) for a in node.attribute]
            label += [
                f"in{k} = {constants[name]}"
                for k, name in enumerate(node.input)
                if name in constants
            ]
            text = escape(label[0]) + "".join("<br/>" + escape(x) for x in label[1:])
            call = (node.domain, node.op_type) in functions
            say(f'{self.indent}{box}[["{text}"]]' if call else f'{self.indent}{box}["{text}"]')
            for name in node.input:
                if name in producer:
                    self.edge(producer[name], box, name)
            for k, name in enumerate(node.output):
                if name:
                    producer[name] = (box, k, len(node.output))
            if call:
                calls.append((box, (node.domain, node.op_type)))
        for index, (name, text) in enumerate(outputs):
            shown = name
            if GENERATED_NAME.match(name):  # a value number says nothing: say what it is
                shown = "output" if len(outputs) == 1 else f"output {index}"
            label = f"{shown}: {text}" if text else shown
            say(f'{self.indent}{p}o{index}(["{escape(label)}"])')
            if name in producer:
                self.edge(producer[name], f"{p}o{index}", name, named=False)
        return calls

    def edge(
        self, source: tuple[str, int, int], target: str, tensor: str, named: bool = True
    ) -> None:
        """An edge, labelled with its tensor's name where that helps: out of a node with several outputs, or an
        intermediate tensor with a meaningful name (not a graph input or output: their boxes say the name)."""
        box, _, count = source
        meaningful = count > 0 and not GENERATED_NAME.match(tensor)
        if named and (count > 1 or meaningful):
            self.lines.append(f'{self.indent}{box} -->|"{escape(tensor)}"| {target}')
        else:
            self.lines.append(f"{self.indent}{box} --> {target}")


def render(model: onnx.ModelProto) -> str:
    """The Mermaid flowchart of MODEL (text without the ``` fence, ending in a newline)."""
    graph = model.graph
    constants = {init.name: values_text(numpy_helper.to_array(init)) for init in graph.initializer}
    functions = {(f.domain, f.name): f for f in model.functions}
    lines = ["flowchart LR"]
    inputs = [(v.name, type_text(v.type)) for v in graph.input if v.name not in constants]
    outputs = [(v.name, type_text(v.type)) for v in graph.output]
    calls = Drawing(lines, "").draw(inputs, outputs, list(graph.node), constants, functions)
    if functions or sum(" --> " in line or " -->|" in line for line in lines) > SIDEWAYS:
        lines[0] = "flowchart TB"  # a long chain drawn sideways would shrink to fit the column
    for number_, key in enumerate(sorted(functions)):
        function = functions[key]
        fid = f"f{number_}"
        title = f"function {op_name(onnx.helper.make_node(function.name, [], [], domain=function.domain))}"
        if function.attribute or function.attribute_proto:
            names = list(function.attribute) + [a.name for a in function.attribute_proto]
            title += f" ({', '.join(names)})"
        lines.append(f'    subgraph {fid}["{escape(title)}"]')
        lines.append("        direction TB")
        Drawing(lines, f"{fid}_", "        ").draw(
            [(name, "") for name in function.input],
            [(name, "") for name in function.output],
            list(function.node),
            {},
            functions,
        )
        lines.append("    end")
        for box, called in calls:
            if called == key:
                lines.append(f"    {box} -. body .-> {fid}")
    if (
        functions
    ):  # the graph's outputs below the bodies, not beside them (the picture stays narrow)
        lines += [f"    f{len(functions) - 1} ~~~ o{k}" for k in range(len(outputs))]
    return "\n".join(lines) + "\n"


def render_file(path: pathlib.Path | str) -> str:
    return render(onnx.load(str(path), load_external_data=False))


def pictures(readme: str) -> list[tuple[str, str]]:
    """(model name, current Mermaid text) of every picture in a README, in order."""
    return [(m["model"], m["body"]) for m in PICTURE.finditer(readme)]


def redraw(readme: str, models: pathlib.Path) -> str:
    """README with every picture redrawn from MODELS/<name>.onnx (FileNotFoundError names a missing model)."""

    def replace(match: re.Match) -> str:
        path = models / match["model"]
        if not path.is_file():
            raise FileNotFoundError(f"no model {path}")
        return f"<!-- graph: {match['model']} -->\n\n```mermaid\n{render_file(path)}```"  # a blank line: MD031

    return PICTURE.sub(replace, readme)


def folders_with_pictures(root: pathlib.Path = ROOT) -> list[str]:
    return sorted(
        readme.parent.name
        for readme in root.glob("*/README.md")
        if not readme.parent.name.startswith(".") and pictures(readme.read_text(encoding="utf-8"))
    )


def fix_command(folder: str) -> str:
    return f"python {folder}/test.py && python draw_graphs.py --write {folder}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--write", action="store_true", help="redraw the pictures in the folders' READMEs"
    )
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if a README's picture differs from its model"
    )
    parser.add_argument(
        "--models", default="{folder}/output", help="where the models are (default: %(default)s)"
    )
    parser.add_argument("paths", nargs="*", metavar="MODEL_OR_FOLDER")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        if len(args.paths) != 1:
            parser.error("give one MODEL.onnx to draw, or --write/--check [FOLDER ...]")
        sys.stdout.write(render_file(args.paths[0]))
        return 0
    folders = [pathlib.Path(p).resolve().name for p in args.paths] or folders_with_pictures()
    failed = 0
    for folder in folders:
        readme_path = ROOT / folder / "README.md"
        if not readme_path.is_file():
            print(f"FAIL: {folder}: no {readme_path}")
            failed += 1
            continue
        models = pathlib.Path(args.models.replace("{folder}", folder))
        if not models.is_absolute():
            models = ROOT / models
        readme = readme_path.read_text(encoding="utf-8")
        try:
            new = redraw(readme, models)
        except FileNotFoundError as error:
            out = "" if args.models == parser.get_default("models") else f" --out {models}"
            print(f"FAIL: {folder}/README.md: {error}: run `python {folder}/test.py{out}` first")
            failed += 1
            continue
        names = ", ".join(name for name, _ in pictures(readme)) or "no pictures"
        if new == readme:
            print(f"{folder}/README.md: up to date ({names})")
        elif args.write:
            readme_path.write_text(new, encoding="utf-8")
            print(f"{folder}/README.md: redrawn ({names})")
        else:
            stale = [
                a
                for (a, old), (_, fresh) in zip(pictures(readme), pictures(new), strict=True)
                if old != fresh
            ]
            print(
                f"FAIL: {folder}/README.md: out of date: {', '.join(stale)}; fix: {fix_command(folder)}"
            )
            failed += 1
        twin = readme_path.with_name("README.zh-CN.md")  # the Chinese page holds the same pictures
        if args.write and twin.is_file():
            translated = twin.read_text(encoding="utf-8")
            redrawn = redraw(translated, models)
            if redrawn != translated:
                twin.write_text(redrawn, encoding="utf-8")
                print(f"{folder}/README.zh-CN.md: redrawn")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
