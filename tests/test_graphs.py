"""The pictures in the READMEs: each `<!-- graph: X.onnx -->` Mermaid block equals what draw_graphs.py draws from the
model X.onnx that the folder's test.py wrote in this test session."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, ROOT

import draw_graphs

FOLDERS = [
    name
    for name in EXAMPLES
    if draw_graphs.pictures((ROOT / name / "README.md").read_text(encoding="utf-8"))
]


def test_some_readme_has_pictures():
    assert FOLDERS, "no README holds a `<!-- graph: X.onnx -->` picture"


@pytest.mark.parametrize("name", FOLDERS)
def test_pictures_match_the_models(name, example_run):
    run = example_run(name)
    readme = (ROOT / name / "README.md").read_text(encoding="utf-8")
    stale = []
    for model, picture in draw_graphs.pictures(readme):
        path = run.out / model
        assert path.is_file(), f"{name}/README.md draws {model}, which {name}/test.py did not write"
        if picture != draw_graphs.render_file(path):
            stale.append(model)
    assert not stale, (
        f"{name}/README.md: the picture of {', '.join(stale)} no longer matches the model; redraw it with: "
        f"{draw_graphs.fix_command(name)}"
    )


def test_rendering_is_deterministic(example_run):
    name = FOLDERS[0]
    model, _ = draw_graphs.pictures((ROOT / name / "README.md").read_text(encoding="utf-8"))[0]
    path = example_run(name).out / model
    assert draw_graphs.render_file(path) == draw_graphs.render_file(path)
