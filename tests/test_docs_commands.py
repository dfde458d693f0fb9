"""Every ``kswarm`` command that README.md and docs/*.md show is one the real CLI parses: its command
path exists in ``orchestrator.cli.main.app``, every option it names is that command's, and a
command in a code block has its required arguments and the values of its options. Nothing is run:
the docs are checked against the parser itself, so a renamed command or a dropped option fails here.

Placeholders stand for what the reader fills in (``<name>``, ``NAME``, ``N``, ``…``); an inline
mention in prose (`kswarm pr review`) names a command, so only its path and options are checked; a
message kswarm prints (`kswarm sandbox: <step>: ...`) is not a command."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from orchestrator.cli.main import app

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PLACEHOLDER = "PLACEHOLDER"
ALTERNATIVE = "\x00"
ELLIPSES = {"…", "...", "[...]", "[…]"}
SEPARATORS = {"|", "||", "&", "&&", ";", ">", ">>", "(", ")", "2>", "<"}
# `kswarm` at the start of a command: after a shell prompt, environment assignments and a path
# (`./kswarm`, `.venv/bin/kswarm`), or `python -m orchestrator.cli`; at the start of a line or after
# a pipe, `&&`, `;` or `$(`.
ENV_VALUE = r"""(?:"[^"]*"|'[^']*'|\$\([^)]*\)|<[^>]*>|[^\s"'])+"""
COMMAND_START = re.compile(
    rf"(?:^|(?<=[|;&(]))\s*(?:\$\s+)?(?:export\s+)?(?:[A-Z_][A-Z0-9_]*={ENV_VALUE}\s+)*"
    r"(?:[\w./~-]*/)?(?:kswarm|python3?\s+-m\s+orchestrator\.cli)(?=\s|$)"
)


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    args: tuple[str, ...]  # what follows `kswarm`, placeholders as PLACEHOLDER
    in_code_block: bool
    text: str


def code_of(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, text, in a code block) of every fenced block's line and every inline code span."""
    text = path.read_text()
    lines = text.split("\n")
    fenced = False
    prose: list[tuple[int, str]] = []
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, line, True
        else:
            prose.append((number, line))
    # Inline spans may wrap onto the next line of their paragraph (never across a blank line).
    joined = "\n".join(line for _, line in prose)
    starts = [n for n, _ in prose]
    for match in re.finditer(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)", joined):
        line_index = joined.count("\n", 0, match.start())
        yield starts[line_index], re.sub(r"\s*\n\s*", " ", match.group(1)), False


def placeholders_marked(text: str) -> str:
    """``<alice's token>`` as one word shlex keeps; a table's ``a\\|b`` (alternatives) kept apart from
    a pipe."""
    return re.sub(r"<[^<>]*>", PLACEHOLDER, text).replace("\\|", ALTERNATIVE)


def words_of(text: str) -> list[str]:
    """The shell words of one command, up to a pipe, `&&`, `;`, a redirection or a comment."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote in prose: plain words, cut at a comment
        words = re.sub(r"\s#.*", "", text).split()
    kept: list[str] = []
    for word in words:
        if word in SEPARATORS:
            break
        if word not in ELLIPSES:  # `[-f swarm.yaml]`, `[-d [--json]]`: optional parts, shown
            word = word.strip("[]")
        if word.startswith("-") and ALTERNATIVE in word:  # `--approve\|--comment`: each an option
            kept.extend(word.split(ALTERNATIVE))
        elif word.startswith("-") and "/-" in word:  # `--approve/--comment`, `--restart/--no-restart`
            kept.extend(word.split("/"))
        elif word:
            kept.append(word.replace(ALTERNATIVE, "|"))
    return kept


def cli_table_commands(root_commands: set[str]) -> list[DocCommand]:
    """docs/cli.md's table of nouns lists each module's commands without `kswarm`: every code span of
    its second column that begins with a command name is one (`logs [NAME...] [-f]`)."""
    found = []
    path = REPO / "docs" / "cli.md"
    for number, line in enumerate(path.read_text().split("\n"), 1):
        cells = line.split(" | ")
        if not re.match(r"\| `\w+\.py` \|", line) or len(cells) < 2:
            continue
        for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", cells[1]):
            if span.split()[0] in root_commands:
                args = tuple(words_of(placeholders_marked(span)))
                found.append(DocCommand(f"docs/cli.md:{number}", args, False, span))
    return found


def doc_commands() -> list[DocCommand]:
    found = []
    for path in DOCS:
        for number, text, in_block in code_of(path):
            for start in COMMAND_START.finditer(text):
                if not in_block and start.start() != 0:
                    continue  # inline code that does not begin with the command: prose about it
                rest = placeholders_marked(text[start.end() :])
                found.append(
                    DocCommand(
                        where=f"{path.relative_to(REPO)}:{number}",
                        args=tuple(words_of(rest)),
                        in_code_block=in_block,
                        text=text.strip(),
                    )
                )
    return found


def is_placeholder(word: str) -> bool:
    """A word the reader replaces: ``<name>``, ``NAME``, ``N``, ``ID``, ``…``, ``sk-...``."""
    return (
        word == PLACEHOLDER
        or word in ELLIPSES
        or PLACEHOLDER in word
        or bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", word))
        or word.endswith(("…", "..."))
    )


def params_of(command: Any, kind: str) -> list[Any]:
    return [p for p in command.params if p.param_type_name == kind]


def takes_value(option: Any) -> bool:
    return not (option.is_flag or option.count)


def problems_of(doc: DocCommand, root: Any) -> list[str]:
    """What the parser would refuse in ``doc`` (empty: it parses)."""
    command, path, words = root, ["kswarm"], list(doc.args)
    if words and words[0].endswith(":"):
        return []  # a message kswarm prints (`kswarm sandbox: <step>: <reason>`), not a command
    while hasattr(command, "commands"):
        if not words or is_placeholder(words[0]):
            return []  # a group named (`kswarm agent …`, `kswarm <noun> <verb>`)
        word = words.pop(0)
        if re.fullmatch(r"[a-z-]+(?:/[a-z-]+)+", word):  # `memory show/snapshot/reset`: each of them
            return [
                problem
                for alternative in word.split("/")
                for problem in problems_of(replace(doc, args=(*path[1:], alternative, *words)), root)
            ]
        if word.startswith("-"):
            names = {n for p in params_of(command, "option") for n in p.opts + p.secondary_opts}
            if word.partition("=")[0] not in names | {"--help"}:
                return [f"`{' '.join(path)}` has no option {word}"]
            continue
        if word not in command.commands:
            return [f"`{' '.join(path)}` has no command {word!r}"]
        command = command.commands[word]
        path.append(word)
    options = {n: p for p in params_of(command, "option") for n in p.opts + p.secondary_opts}
    arguments = params_of(command, "argument")
    name = " ".join(path)
    problems: list[str] = []
    positionals, abbreviated = 0, False
    while words:
        word = words.pop(0)
        if word in ELLIPSES:
            abbreviated = True
        elif word.startswith("-") and word != "-" and not is_placeholder(word):
            option_name, has_value, _ = word.partition("=")
            option = options.get(option_name)
            if option is None and not option_name.startswith("--"):
                option = options.get(option_name[:2])  # `-n5`: a short option and its value
                has_value = has_value or (option is not None and len(option_name) > 2)
            if option is None and option_name != "--help":
                problems.append(f"`{name}` has no option {option_name}")
                if words and not words[0].startswith("-"):
                    words.pop(0)  # perhaps its value: not counted as an argument too
            elif option is not None and takes_value(option) and not has_value:
                if words and not (words[0].startswith("-") and not is_placeholder(words[0])):
                    words.pop(0)
                elif doc.in_code_block:
                    problems.append(f"`{name}`: {option_name} needs a value")
        else:
            positionals += 1
    variadic = any(a.nargs == -1 for a in arguments)
    if positionals > len(arguments) and not variadic:
        problems.append(f"`{name}` takes {len(arguments)} argument(s), {positionals} given")
    required = [a.name.upper() for a in arguments if a.required]
    if doc.in_code_block and not abbreviated and positionals < len(required):
        problems.append(f"`{name}` needs {' '.join(required)}")
    return problems


@pytest.fixture(scope="module")
def cli() -> Any:
    return get_command(app)


def test_the_docs_show_many_commands_from_readme_and_docs() -> None:
    commands = doc_commands()
    files = {c.where.split(":")[0] for c in commands}
    assert len(commands) > 150 and "README.md" in files and "docs/cli.md" in files
    assert any(c.in_code_block for c in commands) and any(not c.in_code_block for c in commands)


def test_every_command_in_readme_and_docs_parses(cli: Any) -> None:
    documented = doc_commands() + cli_table_commands(set(cli.commands))
    wrong = [
        f"{doc.where}: {problem}  [{doc.text}]" for doc in documented for problem in problems_of(doc, cli)
    ]
    assert not wrong, "commands in the docs the CLI would refuse:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("line", "in_block", "expected"),
    [
        ("kswarm pr review 5 --approve -m ok", True, []),
        ("KSWARM_TOKEN=<alice's token> ./kswarm chat send @bob hi  # a DM", True, []),
        ("kswarm agent timeline NAME -f --tail 5", True, ["`kswarm agent timeline` has no option --tail"]),
        ("kswarm job list --pool cpu", True, ["`kswarm job` has no command 'list'"]),
        ("kswarm pr review --approve", True, ["`kswarm pr review` needs NUMBER"]),
        ("kswarm pr review", False, []),  # prose naming the command
        ("kswarm up -f", True, ["`kswarm up`: -f needs a value"]),
        ("kswarm ps extra", True, ["`kswarm ps` takes 0 argument(s), 1 given"]),
        ("kswarm prs --json | jq '.[0]'", False, []),
        ("kswarm agent …", False, []),
        ("./kswarm logs dev-1 dev-2 -f", True, []),
        ("kswarm dataset build --out=/tmp/d", True, []),
        ("kswarm agent memory show/bogus NAME", False, ["`kswarm agent memory` has no command 'bogus'"]),
        ("kswarm pr review N --approve/--reject", False, ["`kswarm pr review` has no option --reject"]),
        ("kswarm sandbox: bubblewrap: <reason>", False, []),  # a message kswarm prints
    ],
)
def test_the_check_refuses_what_the_parser_refuses(
    cli: Any, line: str, in_block: bool, expected: list[str]
) -> None:
    start = COMMAND_START.search(line)
    assert start is not None
    doc = DocCommand("t:1", tuple(words_of(placeholders_marked(line[start.end() :]))), in_block, line)
    assert problems_of(doc, cli) == expected


def test_the_demo_s_options_table_is_the_demo_s_options_and_their_defaults(cli: Any) -> None:
    """docs/demo.md's "Options": every option of `kswarm demo`, none more, each default as the code's."""
    text = (REPO / "docs" / "demo.md").read_text().split("## Options", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(--[\w-]+)[^`]*` \| ([^|]*(?:\\\|[^|]*)*) \|", text, flags=re.M)
    documented = {option: default.strip() for option, default in rows}
    demo = cli.commands["demo"]
    options = {p.opts[0]: p for p in params_of(demo, "option")}
    assert set(documented) == set(options) - {"--help"}
    for name, option in options.items():
        default, cell = option.default, documented[name]
        if isinstance(default, bool):
            assert cell == ("on" if default else "off"), name
        elif isinstance(default, str) and "," in default:  # a list of tasks: counted
            assert cell == f"{len(default.split(','))} tasks", name
        elif isinstance(default, (str, int, Path)) and not isinstance(default, bool):
            assert str(default) in cell, (name, default, cell)
