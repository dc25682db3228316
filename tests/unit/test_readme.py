"""The README stays true to the code: its Python blocks parse, its `bkledger ...` command lines parse with the
real CLI parser, its `make` targets exist, and its relative links (docs/, examples/) point at files.

Issue 43: the README is what a new user copies from; a renamed verb, a moved doc or a typo in an example
must fail a test, not a user.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from bkledger.bookie.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

_FENCE = re.compile(r"^```(\w*)\s*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def _prose(text: str) -> str:
    return _FENCE.sub("", text)


def command_lines(text: str, program: str) -> list[str]:
    """Every line of a shell/plain block that starts with `program ` or runs it in `$(...)`, and every inline
    code span that starts with it; a trailing `# comment` and a leading `$ ` are dropped."""
    found: list[str] = []
    for lang, body in code_blocks(text):
        if lang not in ("", "sh", "shell", "bash", "console"):
            continue
        for line in body.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith(program + " "):
                found.append(line.split("  #")[0].split(" # ")[0].strip())
            found.extend(m.strip() for m in re.findall(r"\$\((" + program + r" [^)]*)\)", line))
    for span in _INLINE.findall(_prose(text)):
        if span.startswith(program + " "):
            found.append(span.strip())
    return found


def parse_error(argv: list[str]) -> str | None:
    """None if `bkledger argv` parses with the real parser, else argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", text, re.MULTILINE)}


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text()


def test_python_blocks_parse(readme: str) -> None:
    blocks = [body for lang, body in code_blocks(readme) if lang == "python"]
    assert len(blocks) >= 2, "the README shows Spark (append, read, stream) and the client in Python blocks"
    for body in blocks:
        try:
            ast.parse(body)
        except SyntaxError as exc:
            pytest.fail(f"a python block of README.md does not parse: {exc}\n{body}")


def test_bkledger_command_lines_exist_in_the_cli(readme: str) -> None:
    lines = command_lines(readme, "bkledger")
    assert len(lines) >= 5, "the README shows local up/status/down and shell/log verbs"
    bad = {line: err for line in lines if (err := parse_error(shlex.split(line)[1:])) is not None}
    assert not bad, f"README command lines the CLI parser refuses: {bad}"


def test_make_targets_exist(readme: str) -> None:
    shown = {line.split()[1] for line in command_lines(readme, "make")}
    assert {"demo", "test"} <= shown, "the README keeps `make demo` and `make test`"
    assert shown <= make_targets(), f"make targets the Makefile lacks: {shown - make_targets()}"


def test_relative_links_point_at_files(readme: str) -> None:
    links = [link.split("#")[0] for link in _LINK.findall(readme) if "://" not in link and not link.startswith("#")]
    assert any(link.startswith("docs/") for link in links), "the README links its docs/"
    missing = [link for link in links if link and not (REPO / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def anchors(page: Path) -> set[str]:
    """GitHub's ids of a Markdown page's headings: lower case, punctuation dropped, spaces to dashes."""
    text = _FENCE.sub("", page.read_text())
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


def dead_links(page: Path) -> list[str]:
    """Relative links of `page` whose file, or whose #anchor in that file, does not exist."""
    dead: list[str] = []
    for link in _LINK.findall(page.read_text()):
        if "://" in link or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        path = page.parent / target if target else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            dead.append(f"{page.name}: {link}")
    return dead


def test_docs_links_and_anchors_exist() -> None:
    """The README and the docs/ pages link each other and the code; a moved file or a renamed section must
    not leave a dead link."""
    dead = [d for page in [README, *sorted((REPO / "docs").glob("*.md"))] for d in dead_links(page)]
    assert not dead, f"dead links: {dead}"


def test_the_checker_catches_a_bad_block_and_a_bad_verb() -> None:
    """The checks above are not vacuous: a broken block, an unknown verb and a missing argument all fail."""
    sample = "```python\nx = (\n```\n\n```\nbkledger local sideways\nX=$(bkledger shell readledger)\n```\n"
    with pytest.raises(SyntaxError):
        ast.parse(code_blocks(sample)[0][1])
    assert command_lines(sample, "bkledger") == ["bkledger local sideways", "bkledger shell readledger"]
    assert parse_error(["local", "sideways"]) is not None
    assert parse_error(["shell", "readledger"]) is not None
    assert parse_error(["local", "up", "--bookies", "3"]) is None
    assert "a-kafka-cheat-sheet" in anchors(README)


def test_configuration_page_names_every_bookie_and_client_key() -> None:
    """docs/configuration.md lists every key a bookie or a client reads; a new key needs its line there."""
    import dataclasses

    from bkledger.bookie.config import BookieConfig
    from bkledger.client.config import ClientConfig

    page = (REPO / "docs" / "configuration.md").read_text()
    keys = {f.name for f in dataclasses.fields(BookieConfig)} | {f.name for f in dataclasses.fields(ClientConfig)}
    missing = sorted(key for key in keys if f"`{key}`" not in page)
    assert not missing, f"keys docs/configuration.md does not name: {missing}"
