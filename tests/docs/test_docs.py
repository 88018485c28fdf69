"""The docs cannot go stale silently: every repository path, relative link (and its anchor),
``ttlpolicy`` module or public name and ``ttlpolicy ...`` command that README.md, docs/*.md and
bench/README.md mention exists, imports or parses; the README and RESULTS keep their size
limits (issue 33)."""

from __future__ import annotations

import ast
import importlib
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

import ttlpolicy
from ttlpolicy.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "bench" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "adapters").glob("*/README.md")),
]
#: the scripts' comments point readers at documents too
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
RESULTS = ROOT / "bench" / "RESULTS.md"
#: top-level folders of the repository: a backticked token under one of them is a path
TOP = (
    "python/", "bench/", "docs/", "tests/", "adapters/", "scripts/", "rust/", "bindings/",
    "requirements/",
)  # fmt: skip
#: adapters' import packages, checked in their source (their venvs are not this one)
ADAPTER_SRC = {
    "ttlpolicy_vllm": ROOT / "adapters/vllm/src",
    "ttlpolicy_sglang": ROOT / "adapters/sglang/src",
    "ttlpolicy_ray": ROOT / "adapters/ray/src",
}


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def code_spans(text: str) -> list[str]:
    """Inline code spans (`...`), fenced blocks left out."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose)


def shell_tokens(text: str) -> list[str]:
    """Words of the shell blocks (``bash``, ``sh``), comments dropped: a command's paths;
    after a ``cd DIR`` the words are read from DIR (``cd adapters/ray && pytest tests/x.py``)."""
    words = []
    for lang, block in fenced_blocks(text):
        if lang not in ("bash", "sh"):
            continue
        here = ""
        for line in block.splitlines():
            for command in line.split(" #")[0].split("&&"):
                argv = command.split()
                if argv[:1] == ["cd"] and len(argv) == 2:
                    here = argv[1].rstrip("/") + "/"
                    continue
                relative = [w for w in argv if "/" in w and "=" not in w and w[0] not in "-/~$"]
                words += [w for w in argv if w not in relative] + [here + w for w in relative]
    return words


def repo_paths(doc: Path) -> set[str]:
    """Repository paths a document names in code spans, in its shell blocks' commands or in
    relative links (resolved against the document's folder)."""
    text = doc.read_text()
    found = set()
    for span in [*code_spans(text), *shell_tokens(text)]:
        for token in span.split():
            token = token.strip(",;:()")
            if token.startswith(TOP) and not re.search(r"[<>*…$\[\]{}]", token):
                found.add(token.split("::")[0])
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        linked = (doc.parent / target.split("#")[0]).resolve()
        # outside the repository (a test's own file): kept absolute, checked all the same
        found.add(str(linked.relative_to(ROOT)) if linked.is_relative_to(ROOT) else str(linked))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=ids(DOCS))
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    # an adapter's README names its own files from its folder (`tests/test_serve.py`)
    missing = sorted(
        p for p in repo_paths(doc) if not (ROOT / p).exists() and not (doc.parent / p).exists()
    )
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


#: What only the project's own machines have: notes and trace paths beside the repository.
OUTSIDE = re.compile(r"shared/notes|\.\./shared/traces/\S|/work/")


@pytest.mark.parametrize("doc", DOCS + SCRIPTS, ids=ids(DOCS + SCRIPTS))
def test_no_document_points_outside_the_repository(doc: Path) -> None:
    """A reader has a clone: a link, a path or a command that leads outside it fails for them
    (issue 47: notes files beside the repository, `--trace ../shared/traces/...`)."""
    text = doc.read_text()
    outside = [m.group(0) for m in OUTSIDE.finditer(text)]
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        local = not re.match(r"[a-z]+:", target) and not target.startswith("#")
        if local and not (doc.parent / target.split("#")[0]).resolve().is_relative_to(ROOT):
            outside.append(target)
    assert not outside, f"{doc.relative_to(ROOT)} points outside the repository: {outside}"


def test_the_outside_check_catches_each_kind(tmp_path) -> None:
    doc = ROOT / "docs" / "x.md"  # where it would sit; read from tmp_path
    text = "[n](../../notes.md) see shared/notes/x.md; `--trace ../shared/traces/claude-code`"
    assert len(OUTSIDE.findall(text)) == 2
    assert not (doc.parent / "../../notes.md").resolve().is_relative_to(ROOT)
    assert not OUTSIDE.search("TTLPOLICY_TRACES (default `../shared/traces`)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=ids(DOCS))
def test_every_link_anchor_is_a_heading(doc: Path) -> None:
    dead = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target) or "#" not in target:
            continue
        path, anchor = target.split("#", 1)
        linked = (doc.parent / path).resolve() if path else doc
        if anchor not in anchors(linked):
            dead.append(target)
    assert not dead, f"{doc.name} links to headings that do not exist: {dead}"


@cache
def adapter_names(module_file: Path) -> set[str]:
    tree = ast.parse(module_file.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def resolves(dotted: str) -> bool:
    """``ttlpolicy.x.y``: the longest importable module prefix, then attributes.  Adapter
    packages are looked up in their source (module file, then a top-level name in it)."""
    parts = dotted.split(".")
    if parts[0] in ADAPTER_SRC:
        src = ADAPTER_SRC[parts[0]]
        for n in range(len(parts), 0, -1):
            base = src.joinpath(*parts[:n])
            module = base.with_suffix(".py") if base.with_suffix(".py").exists() else None
            if module is None and (base / "__init__.py").exists():
                module = base / "__init__.py"
            if module is not None:
                rest = parts[n:]
                return not rest or (len(rest) <= 2 and rest[0] in adapter_names(module))
        return False
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for attr in parts[n:]:
            fields = getattr(obj, "model_fields", {})  # a pydantic model's fields
            if attr in fields:
                return True
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def dotted_names(doc: Path) -> set[str]:
    """``ttlpolicy.…`` names in code spans and prose, and ``tp.X`` (the README's alias)."""
    text = doc.read_text()
    # a name cut short by a wildcard (`PolicyConfig.prefill_*`) is a family, not a name
    names = set(
        re.findall(r"\b(ttlpolicy(?:_vllm|_sglang|_ray)?(?:\.[A-Za-z_]\w*)+)(?![\w*])", text)
    )
    names.update("ttlpolicy." + n for n in re.findall(r"\btp\.([A-Za-z_]\w*)(?![\w*])", text))
    # Class.member in code spans, for the package's public classes
    public = {n for n in dir(ttlpolicy) if n[:1].isupper()}
    for span in code_spans(text):
        for cls, member in re.findall(r"\b([A-Z]\w+)\.([a-z_]\w*)(?![\w*])", span):
            if cls in public:
                names.add(f"ttlpolicy.{cls}.{member}")
    # file names (ttlpolicy.toolcalls.py) are paths, not modules
    return {n.removesuffix(".py") for n in names if not n.endswith((".md", ".json"))}


@pytest.mark.parametrize("doc", DOCS, ids=ids(DOCS))
def test_every_module_and_name_a_doc_mentions_exists(doc: Path) -> None:
    missing = sorted(n for n in dotted_names(doc) if not resolves(n))
    assert not missing, f"{doc.name} mentions names that do not resolve: {missing}"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block, fences paired in order."""
    blocks: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def commands(doc: Path) -> list[str]:
    """``ttlpolicy ...`` command lines in the doc's shell code blocks (continuations
    joined, comments dropped)."""
    found = []
    for lang, block in fenced_blocks(doc.read_text()):
        if lang not in ("", "bash", "sh"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("ttlpolicy "):
                found.append(line)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=ids(DOCS))
def test_every_command_a_doc_gives_parses(doc: Path) -> None:
    parser, _ = build_parser()
    for line in commands(doc):
        argv = shlex.split(line)[1:]
        try:
            parser.parse_args(argv)
        except SystemExit as e:  # --help exits 0; a bad argument 2
            if e.code != 0:
                pytest.fail(f"{doc.name}: `{line}` does not parse (exit {e.code})")


#: ``python`` blocks run here; a block tagged ``python client`` needs a server (the
#: engine guides' quickstarts: adapters/*/tests/test_quickstart.py runs them)
PYTHON_BLOCKS = [
    (doc, i, body)
    for doc in DOCS
    if doc.name != "README.md"  # the README's snippet: tests/cli/test_readme.py, output too
    for i, (lang, body) in enumerate(fenced_blocks(doc.read_text()))
    if lang == "python"
]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"{d.name}:{i}" for d, i, _ in PYTHON_BLOCKS])
def test_every_python_block_in_the_docs_runs(block: tuple[Path, int, str]) -> None:
    exec(compile(block[2], f"{block[0].name} block {block[1]}", "exec"), {})


def test_the_guides_give_commands() -> None:
    """So that the command check above checks something where it matters."""
    for name in ("simulate.md", "plan-tiers.md"):
        assert commands(ROOT / "docs" / name), name
    assert len(commands(ROOT / "README.md")) >= 4
    assert PYTHON_BLOCKS  # design.md's public API


def test_the_readme_fits_a_screen_or_two() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text) <= 8000
    for row in re.findall(r"^\|(.*)\|$", text, re.M):
        for cell in row.split(" | "):
            assert len(cell.strip()) <= 160, cell


def test_results_hold_current_figures_with_a_contents_list() -> None:
    text = RESULTS.read_text()
    assert len(text.splitlines()) <= 800
    contents = text.split("## Contents")[1].split("\n## ")[0]
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [slug(h) for h in re.findall(r"^## (.+)$", text, re.M) if h != "Contents"]
    assert listed == sections


def test_the_check_fails_on_a_dead_path_a_dead_name_and_a_bad_command(tmp_path) -> None:
    doc = tmp_path / "dead.md"
    doc.write_text(
        "See `bench/no_such_script.py` and [x](no-such.md), `ttlpolicy.no_such_module`,\n"
        "[y](#no-such-heading)\n```bash\nttlpolicy compare --no-such-flag\n```\n"
    )
    dead = {p for p in repo_paths(doc) if not (ROOT / p).exists()}
    assert dead == {"bench/no_such_script.py", str(tmp_path / "no-such.md")}
    assert "no-such-heading" not in anchors(doc)
    assert dotted_names(doc) == {"ttlpolicy.no_such_module"}
    assert not resolves("ttlpolicy.no_such_module")
    assert not resolves("ttlpolicy_vllm.no_such_module")
    assert resolves("ttlpolicy.sim.report.format_table")
    assert resolves("ttlpolicy_vllm.TTLScheduler")
    with pytest.raises(SystemExit):
        build_parser()[0].parse_args(shlex.split(commands(doc)[0])[1:])
