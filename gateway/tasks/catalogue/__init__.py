"""The operator task catalogue, the dataset repo's template, reference solutions and the KB's seed notes.

Layout (docs/tasks.md):

- ``tasks/<name>/task.py`` — operator tasks in the harness format (docs/verification.md);
- ``solutions/<name>.py`` — honest Triton reference solutions (pass the harness on the cpu pool);
  ``solutions/wrong/<name>.py`` — deliberately wrong ones the harness must flag;
- ``dataset_template/`` — the dataset repo's initial tree (``tasks/`` is filled from the catalogue);
- ``kb_seed/*.md`` — the knowledge base's first notes.

Nothing here imports torch: task metadata is read from the task files' source, so the gateway can
post the catalogue to the task board without loading the harness.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parent
TASKS_DIR = ROOT / "tasks"
SOLUTIONS_DIR = ROOT / "solutions"
WRONG_DIR = SOLUTIONS_DIR / "wrong"
UNSTABLE_DIR = SOLUTIONS_DIR / "unstable"
TEMPLATE_DIR = ROOT / "dataset_template"
KB_SEED_DIR = ROOT / "kb_seed"


@dataclass(frozen=True)
class TaskInfo:
    """What the board and the dataset README show about a task (read without importing it)."""

    name: str
    title: str
    category: str
    description: str
    entry: str


def task_names() -> list[str]:
    return sorted(p.parent.name for p in TASKS_DIR.glob("*/task.py"))


def task_dir(name: str) -> Path:
    path = TASKS_DIR / name
    if not (path / "task.py").is_file():
        raise KeyError(f"no task {name!r} in the catalogue")
    return path


def solution_names() -> list[str]:
    return sorted(p.stem for p in SOLUTIONS_DIR.glob("*.py"))


def solution_path(name: str) -> Path:
    return SOLUTIONS_DIR / f"{name}.py"


def wrong_solution_names() -> list[str]:
    return sorted(p.stem for p in WRONG_DIR.glob("*.py"))


def wrong_solution_path(name: str) -> Path:
    return WRONG_DIR / f"{name}.py"


def unstable_solution_names() -> list[str]:
    """Kernels right on every ordinary input and wrong on a special value the task's domain declares:
    what the gate's fixed and fresh cases pass and a red team's counterexample breaks (the demo)."""
    return sorted(p.stem for p in UNSTABLE_DIR.glob("*.py"))


def unstable_solution_path(name: str) -> Path:
    return UNSTABLE_DIR / f"{name}.py"


def task_info(name: str) -> TaskInfo:
    """Metadata from the catalogue task file's literal assignments and docstring (no import, no torch)."""
    return task_info_from_source(name, (task_dir(name) / "task.py").read_text())


REQUIRED_NAMES = ("ENTRY", "reference", "make_inputs")


def task_info_from_source(name: str, source: str) -> TaskInfo:
    """Metadata of a task file's source (a catalogue file, or one read from a dataset repo's main);
    ValueError when it is not a task file: not Python, ``NAME`` not the directory's name, or no
    ``ENTRY``, ``reference`` and ``make_inputs``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"tasks/{name}/task.py is not Python: {exc.msg} (line {exc.lineno})") from None
    values: dict[str, object] = {}
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            defined.add(node.targets[0].id)
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    missing = [n for n in REQUIRED_NAMES if n not in defined]
    if missing:
        raise ValueError(f"tasks/{name}/task.py does not define {', '.join(missing)} (docs/verification.md)")
    if values.get("NAME", name) != name:
        raise ValueError(
            f"tasks/{name}/task.py says NAME = {values.get('NAME')!r}: it must be its directory's"
        )
    doc = (ast.get_docstring(tree) or name).strip().splitlines()[0]
    return TaskInfo(
        name=str(values.get("NAME", name)),
        title=doc,
        category=str(values.get("CATEGORY", "")),
        description=str(values.get("DESCRIPTION", "")),
        entry=str(values.get("ENTRY", name)),
    )


def catalogue() -> list[TaskInfo]:
    return [task_info(n) for n in task_names()]


def dataset_files() -> dict[str, bytes]:
    """The dataset repo's initial tree: the template, ``tasks/`` = the catalogue, ``kernels/<task>/``."""
    tasks = catalogue()
    table = "\n".join(f"| `{t.name}` | {t.category} | {t.title} |" for t in tasks)
    files: dict[str, bytes] = {}
    for path in sorted(TEMPLATE_DIR.rglob("*")):
        if path.is_file() and path.name != "TASK_README.md":
            text = Template(path.read_text()).safe_substitute(task_table=table, task_count=len(tasks))
            files[path.relative_to(TEMPLATE_DIR).as_posix()] = text.encode()
    per_task = Template((TEMPLATE_DIR / "kernels" / "TASK_README.md").read_text())
    for t in tasks:
        files[f"tasks/{t.name}/task.py"] = (task_dir(t.name) / "task.py").read_bytes()
        text = per_task.safe_substitute(
            task=t.name, entry=t.entry, title=t.title.rstrip("."), description=t.description
        )
        files[f"kernels/{t.name}/README.md"] = text.encode()
    return files


def kb_files() -> dict[str, bytes]:
    """The knowledge repo's first tree: ``README.md`` and ``notes/*.md``."""
    files: dict[str, bytes] = {}
    for path in sorted(KB_SEED_DIR.glob("*.md")):
        target = "README.md" if path.name == "README.md" else f"notes/{path.name}"
        files[target] = path.read_bytes()
    return files
