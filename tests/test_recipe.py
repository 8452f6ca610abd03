"""The top README's recipe (recipe.py's regions): at most 60 lines, and as pasted it exports both models,
each with one demo.ScaledTanh node, and matches PyTorch at two batch sizes in ONNX Runtime."""

import pathlib
import subprocess
import sys

import onnx
from conftest import CHILD_ENV, ROOT, python_blocks


def test_the_recipe_runs_as_pasted(tmp_path):
    blocks = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    import pages

    recipe = pages.regions(ROOT / "recipe.py")
    assert [block.rstrip("\n") for block in blocks[: len(recipe)]] == list(recipe.values())
    assert sum(len(code.splitlines()) for code in recipe.values()) <= 60
    (tmp_path / "page.py").write_text("\n\n".join(recipe.values()) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "page.py"], cwd=tmp_path, capture_output=True, text=True, env=CHILD_ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for exporter in ("dynamo", "torchscript"):
        path = pathlib.Path(tmp_path, f"scaled_tanh_{exporter}.onnx")
        assert f"{path.name}: one demo.ScaledTanh node, matches PyTorch at batch 1 and 5" in proc.stdout
        model = onnx.load(str(path))
        assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    warnings = [line for line in proc.stderr.splitlines() if "Warning" in line]
    assert all("legacy TorchScript-based ONNX export" in line for line in warnings), warnings
