"""Every chapter runs as a script and as a notebook, every exercise solution passes its chapter's checks,
and no chapter uses a library name before the chapter that builds or introduces it.

Scripts: each chapter runs once in a subprocess as `python chapters/NN_*.py --fast --check-solutions`:
`--fast` shrinks sizes and training runs, `--check-solutions` makes the chapter import
`chapters/solutions/NN_*.py` and run its `check_<name>` functions on them (it prints
"solutions OK"). The chapters also check their own checks against a wrong answer.

Notebooks: each chapter is converted with jupytext and executed with nbclient in a fresh
kernel, in fast mode (a first cell appends `--fast` to sys.argv); every figure the chapter
shows must be in the notebook as a PNG output.

Both run on one CPU thread (train.threads does the same for training runs): the chapters'
matrices are tiny, and on a shared 2-core machine extra BLAS/Numba threads make them many
times slower.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))
TIMEOUT_S = 600  # a hang guard: chapters take seconds, CI machines are busy

# Library names a chapter may import, and the chapter that builds them (or introduces them
# explicitly as "from the library"). A chapter may only import names from its own or earlier chapters.
INTRODUCED = {
    "minitensor": 1, "Function": 2, "nn": 4, "optim": 4, "Adam": 4, "NoamSchedule": 4,
    "scaled_dot_product_attention": 5, "MultiHeadAttention": 6, "split_heads": 6, "merge_heads": 6, "Attention": 6,
    "Embeddings": 7, "PositionwiseFeedForward": 7, "PositionalEncoding": 7, "sinusoid_table": 7,
    "TransformerConfig": 8, "layers": 8, "Encoder": 8, "Decoder": 8,
    "LabelSmoothingLoss": 9, "closed_form_smoothed_loss": 9, "LinearCrossEntropy": 9,
    "Transformer": 10, "padding_mask": 10, "subsequent_mask": 10,
    "greedy_decode": 12, "beam_search": 12, "beam_search_nbest": 12, "length_penalty": 12, "fast_search": 12,
    "corpus_scores": 13, "paper_bleu": 13, "paper_tokenize": 13, "make_number_task": 13,
    "average_checkpoints": 13, "load_checkpoint": 13, "save_checkpoint": 13,
    "Tokenizer": 14,
    "BOS_ID": 15, "EOS_ID": 15, "PAD_ID": 15, "make_batches": 15, "make_model_inputs": 15, "pad_batch": 15,
    "padding_efficiency": 15,
    "checkpointing": 16, "validation": 16, "Prepared": 16, "Split": 16, "TrainState": 16, "RunConfig": 16,
    "train_step": 16, "clip_grad_norm": 16,
    "CheckpointError": 16, "Manifest": 16,
    "matmul_forward_ref": 17, "cupy_launch": 17,
    "CountingBackend": 18, "softmax_composed": 18, "layer_norm_composed": 18, "softmax_forward_ref": 18,
    "layernorm_forward_ref": 18, "numba_cuda": 5,
    "BF16": 19, "bf16_to_float32": 19, "float_to_bf16": 19, "DynamicLossScaler": 19,
    "scale": 20, "shard": 20, "mpiexec_path": 20,
    "config": 21, "prepare_data": 21, "prepared_key": 21, "PREPARED_FORMAT": 21, "TOKENIZER_SAMPLE_SEED": 21,
    "train_flops": 21, "shared_data_dir": 21, "split_compounds": 21, "scale_report": 21,
    "trees": 22, "treebank": 22, "evalb": 22, "scoring": 22, "fit": 22, "translate_lines": 22,
    "layer_norms": 22, "norm_plots": 22,
    "ablate": 23, "ablate_grid": 23, "ablate_report": 23,
}
LIBRARY_PACKAGES = ("minitensor", "transformer", "train")


def chapter_env(pythonpath: str = str(ROOT)) -> dict:
    return dict(os.environ, PYTHONPATH=pythonpath, MPLBACKEND="Agg",
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def run_chapter(chapter: Path, *flags: str, pythonpath: str = str(ROOT)) -> subprocess.CompletedProcess:
    """`python <chapter> <flags>` in a subprocess, from the chapter's repository root."""
    return subprocess.run([sys.executable, str(chapter), *flags], cwd=chapter.parents[1], env=chapter_env(pythonpath),
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_chapters_exist_in_reading_order():
    numbers = [int(p.name[:2]) for p in CHAPTERS]
    assert numbers == list(range(1, len(numbers) + 1)), f"chapters must be numbered 01.. without gaps: {numbers}"
    assert len(CHAPTERS) >= 16
    readme = (ROOT / "chapters" / "README.md").read_text(encoding="utf-8")
    for path in CHAPTERS:
        assert f"`{path.name}`" in readme, f"chapters/README.md does not list {path.name}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_and_solutions_pass(chapter):
    result = run_chapter(chapter, "--fast", "--check-solutions")
    tail = (result.stdout + result.stderr)[-4000:]
    assert result.returncode == 0, f"{chapter.name} failed:\n{tail}"
    number = chapter.name[:2]
    assert f"chapter {number} OK" in result.stdout, f"{chapter.name} did not reach its end:\n{tail}"
    assert "solutions OK" in result.stdout, f"{chapter.name}: the solutions were not checked:\n{tail}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_as_a_notebook_with_its_figures(chapter):
    jupytext = pytest.importorskip("jupytext")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = jupytext.read(chapter)
    notebook.cells.insert(0, nbformat.v4.new_code_cell('import sys\nsys.argv.append("--fast")'))
    client = nbclient.NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(chapter.parent)}})
    client.execute(env=chapter_env(os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])))
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]
    printed = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert f"chapter {chapter.name[:2]} OK" in printed, f"{chapter.name}: the notebook did not reach its end"
    images = sum("image/png" in out.get("data", {}) for out in outputs)
    shown = len(re.findall(r"^show\(fig", chapter.read_text(encoding="utf-8"), flags=re.M))
    assert images == shown, f"{chapter.name}: {shown} figures shown, {images} PNG outputs in the notebook"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_structure(chapter):
    """STYLE.md §7: percent cells, a paper quote, CHECK cells whose asserts all carry a message, Summary (≤3 bullets),
    2-4 Exercises with a predict."""
    text = chapter.read_text(encoding="utf-8")
    assert "# %% [markdown]" in text and "\n# %%\n" in text, "jupytext percent format"
    assert "§" in text, "quote the paper with § anchors"
    assert "# %% CHECK" in text, "at least one CHECK cell of asserts"
    assert "from _common import" in text, "the switches, figures and check helpers come from chapters/_common.py"
    summary = text.split("## Summary", 1)[1].split("## Exercises", 1)[0]
    bullets = [line for line in summary.splitlines() if line.startswith("# - ")]
    assert 1 <= len(bullets) <= 3, f"Summary needs 1-3 bullets, has {len(bullets)}"
    exercises = text.split("## Exercises", 1)[1].split("# %%", 1)[0]
    items = re.findall(r"^# \d+\. ", exercises, flags=re.M)
    assert 2 <= len(items) <= 4, f"Exercises needs 2-4 items, has {len(items)}"
    assert "Predict, then run" in exercises, "one exercise is 'predict, then run'"
    bare = [node.lineno for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Assert) and node.msg is None]
    assert not bare, f"asserts without a message (say what must hold) at lines {bare}"
    checks = set(re.findall(r"^def (check_\w+)\(", text, flags=re.M))
    solution = ROOT / "chapters" / "solutions" / chapter.name
    assert checks, "a chapter defines check_<name> functions for its code exercises"
    assert solution.is_file(), f"{solution.relative_to(ROOT)} is missing"
    finish = re.search(rf'^finish\("{chapter.stem}", \{{(.*?)\}}\)$', text, flags=re.M | re.S)
    assert finish, "the chapter ends with finish(<its name>, {check: solution names}), which runs its solutions"
    for check in checks:
        assert re.search(rf"\b{check}: \"", finish.group(1)), f"{check} is never run on the solutions"
        assert re.search(rf"fails\({check},", text), f"{check} is never shown to reject a wrong answer"
    answers = {node.targets[0].id: node.value for node in ast.parse(solution.read_text(encoding="utf-8")).body
               if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    assert isinstance(answers.get("PREDICT"), ast.Constant) and len(answers["PREDICT"].value) > 80, \
        f"{solution.name} needs PREDICT, the answer key to the 'predict, then run' exercise"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_uses_only_what_earlier_chapters_built(chapter):
    number = int(chapter.name[:2])
    for node in ast.walk(ast.parse(chapter.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] in LIBRARY_PACKAGES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARY_PACKAGES:
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            assert name in INTRODUCED, f"{chapter.name} imports {name}: add it to INTRODUCED with the chapter " \
                                       f"that builds or introduces it"
            assert INTRODUCED[name] <= number, f"{chapter.name} uses {name}, built in chapter {INTRODUCED[name]:02d}"


def test_chapters_never_use_environment_flags():
    """The one switch is `--fast` on the command line (STYLE.md §9): no os.environ in chapters, but for numba's
    own switch to its CUDA simulator, set in _common.numba_cuda when there is no GPU."""
    simulator = 'os.environ["NUMBA_ENABLE_CUDASIM"] = "1"'
    for path in CHAPTERS + sorted((ROOT / "chapters").glob("_*.py")) + \
            sorted((ROOT / "chapters" / "solutions").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name == "_common.py":
            text = text.replace(simulator, "", 1)
        assert "os.environ" not in text, f"{path.name} reads the environment"


def test_figures_go_through_show():
    """Every figure is saved under chapters/_out (ignored by git) and shown inline in notebooks, via _common.show."""
    assert "chapters/_out/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    for path in CHAPTERS:
        text = path.read_text(encoding="utf-8")
        assert ".savefig(" not in text and "plt.close(" not in text, f"{path.name}: use show(fig, name) instead"
        figures = len(re.findall(r"plt\.subplots\(", text))
        shown = len(re.findall(r"^show\(fig, \"(\d\d)_\w+\"\)", text, flags=re.M))
        assert figures == shown, f"{path.name}: {figures} figures made, {shown} shown with show(fig, 'NN_name')"
        assert all(n == path.name[:2] for n in re.findall(r"^show\(fig, \"(\d\d)_", text, flags=re.M)), \
            f"{path.name}: figure names start with the chapter number"
