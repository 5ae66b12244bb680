"""The documentation stays true to the code and to itself.

The README: its test command is what CI runs. The user's guide (docs/pages/, the site
docs/mkdocs.yml builds): its configuration table lists every setting with its flag and default,
its command table every command. The design (stream_rater/README.md): its layout table is the
tree. Every document: every table is well formed, every relative link and anchor resolves, and
every repository path named in backticks exists — so no document refers to a file that is not
in the repository."""

import argparse
import importlib
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from stream_rater.cli import build_parser
from stream_rater.config.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
DESIGN = (ROOT / "stream_rater" / "README.md").read_text()
PAGES = ROOT / "docs" / "pages"
#: The user's guide: the README's landing page and the pages of the documentation site.
GUIDE = [ROOT / "README.md", *sorted(PAGES.rglob("*.md"))]
DOCS = [
    "README.md",
    "deploy/README.md",
    "stream_rater/README.md",
    "stream_rater/bench/README.md",
    *(p.relative_to(ROOT).as_posix() for p in GUIDE[1:]),
]


def page(name: str) -> str:
    """The text of the site page `name` (``operations/configuration.md``)."""
    return (PAGES / name).read_text()


#: File endings that make a backticked `a/b.ext` a repository path.
PATH_ENDINGS = (
    ".py",
    ".lua",
    ".yaml",
    ".yml",
    ".json",
    ".toml",
    ".md",
    ".sh",
    ".txt",
    ".html",
    ".js",
    ".css",
)


def test_ci_runs_exactly_the_readme_test_command():
    """The README's test command appears verbatim as a line of .ci/run."""
    blocks = README.split("```sh\n")
    test_command = blocks[2].split("\n```")[0].strip()
    assert test_command.endswith("python -m pytest")
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_configuration_table_lists_every_setting():
    """Each Settings field has a row in the configuration page with its variable, flag, default
    and help."""
    table = page("operations/configuration.md")
    for f in fields(Settings):
        row = f"| `{env_name(f.name)}` | `--{f.name.replace('_', '-')}` | `{f.default!r}` | {f.metadata['help']} |"
        assert row in table, f"docs/pages/operations/configuration.md lacks: {row}"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of `parser` by name (empty if it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_command_table_lists_every_command():
    """Each `stream-rater` command opens a row of the command-line page's table (a row may list
    several, `/`-separated), and each benchmark is named in the bench row."""
    table = page("reference/cli.md")
    named = set(re.findall(r"`(?:stream-rater )?([a-z][a-z-]*)[ `]", table))
    commands = subcommands(build_parser())
    assert set(commands) <= named, f"the command table lacks {sorted(set(commands) - named)}"
    benches = set(re.findall(r"`bench ([a-z0-9-]+)", table)) | set(
        re.findall(r"`stream-rater bench ([a-z0-9-]+)", table)
    )
    bench_choices = subcommands(commands["bench"])
    assert set(bench_choices) <= benches, f"the bench row lacks {sorted(set(bench_choices) - benches)}"


def layout_rows() -> dict[str, str]:
    """The design's code layout table: the path each row is about (``stream_rater/x/`` or
    ``stream_rater/x.py``) → the row's text."""
    table = DESIGN.split("Code layout —", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        where = line.split("|")[2]
        rows[re.search(r"`(stream_rater/[^`]*)`", where).group(1)] = where
    return rows


def test_the_layout_table_names_every_module_and_only_modules_that_exist():
    """Each top-level module of the package has a row; a package's row names each of its public
    modules and scripts; every file a row names exists."""
    rows = layout_rows()
    package = ROOT / "stream_rater"
    tops = {
        f"stream_rater/{p.name}/" if p.is_dir() else f"stream_rater/{p.name}"
        for p in package.iterdir()
        if not p.name.startswith("_") and p.name not in ("data", "py.typed", "README.md")
    }
    assert set(rows) == tops
    for top, row in rows.items():
        if not top.endswith("/"):
            continue
        named = set(re.findall(r"`([\w.]+\.(?:py|lua|yaml))`", row))
        for name in named:
            assert (ROOT / top / name).is_file(), f"{top}{name} is in the README but not in the tree"
        public = {
            p.name
            for p in (ROOT / top).iterdir()
            if p.suffix in (".py", ".lua") and not p.name.startswith("_")
        }
        assert public <= named, f"README's row of {top} lacks {sorted(public - named)}"


def prose(text: str) -> list[str]:
    """The lines of a markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown text: lower case, punctuation
    dropped, spaces as hyphens, a repeated one suffixed -1, -2, …"""
    seen: dict[str, int] = {}
    for line in prose(text):
        if m := re.match(r"#{1,6} (.+)", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            if count:
                seen[f"{slug}-{count}"] = 1
    return set(seen)


@pytest.mark.parametrize("doc", DOCS)
def test_every_table_is_well_formed(doc):
    """Every row of every table has as many cells as its header (`\\|` is a cell's pipe)."""
    for block in "\n".join(prose((ROOT / doc).read_text())).split("\n\n"):
        rows = [r for r in block.splitlines() if r.startswith("|")]
        if len(rows) < 2:
            continue
        widths = {len(re.split(r"(?<!\\)\|", r.strip())) for r in rows}
        assert len(widths) == 1, f"{doc}: a table's rows have different cell counts: {rows[0][:60]}…"
        assert re.fullmatch(r"\|( *:?-+:? *\|)+", rows[1].strip()), f"{doc}: {rows[0][:60]}… lacks its rule"


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_and_anchor_resolves(doc):
    """A relative link names a file or folder of the repository, and its #anchor (or a bare
    #anchor in the same document) a heading of the target."""
    here = (ROOT / doc).parent
    for line in prose((ROOT / doc).read_text()):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (here / path).resolve() if path else ROOT / doc
            assert where.exists(), f"{doc} links to {target}: no such file"
            assert ROOT in where.parents or where == ROOT, f"{doc} links outside the repository: {target}"
            if anchor:
                assert anchor in anchors(where.read_text()), f"{doc} links to {target}: no such heading"


def named_paths(text: str) -> set[str]:
    """The backticked words of a markdown text that look like repository paths: two or more
    segments, and a known file ending, a trailing slash or a first segment that is a top-level
    entry of the repository."""
    tops = {p.name for p in ROOT.iterdir()}
    found = set()
    for line in prose(text):
        for word in re.findall(r"`([^`\s]+)`", line):
            if not re.fullmatch(r"[\w.\-*]+(/[\w.\-*]+)+/?", word):
                continue
            if word.endswith(PATH_ENDINGS) or word.endswith("/") or word.split("/")[0] in tops:
                found.add(word)
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_document_names_exists(doc):
    """Each repository path named in backticks exists, from the repository's root or from the
    document's folder (a `*` matches as a glob)."""
    here = (ROOT / doc).parent
    for path in named_paths((ROOT / doc).read_text()):
        assert any(any(base.glob(path.rstrip("/"))) for base in (ROOT, here)), (
            f"{doc} names `{path}`: no such file"
        )


def test_the_path_check_sees_a_missing_file():
    """The path check is not vacuous: a made-up path is caught, a real one passes."""
    assert named_paths("see `stream_rater/nowhere.py` and `deploy/k8s/base/`") == {
        "stream_rater/nowhere.py",
        "deploy/k8s/base/",
    }
    assert not any(ROOT.glob("stream_rater/nowhere.py"))
    assert "order-the-ladder-is-the-unit-of-order" in anchors(page("concepts/order.md"))


def code_blocks(text: str) -> list[str]:
    """The contents of the fenced code blocks of a markdown text."""
    return re.findall(r"^```[\w-]*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


#: A backticked dotted name that reads as code (`stream_rater.queries.Queries`,
#: `contracts.match.match_key`): identifiers, one with an underscore or a capital — not a Kafka
#: setting (`min.insync.replicas`) nor a file (`ladders.toml`).
CODE_NAME = re.compile(r"`((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*)`")


def code_names(text: str) -> set[str]:
    """The dotted code names of the prose of a markdown text, each as a `stream_rater.` name."""
    names = set()
    for line in prose(text):
        for name in CODE_NAME.findall(line):
            if name.endswith(PATH_ENDINGS) or not re.search(r"_|[A-Z]", name):
                continue
            names.add(name if name.startswith("stream_rater.") else f"stream_rater.{name}")
    return names


def resolves(name: str) -> bool:
    """Whether `name` is a module of the package or an attribute of one (`module.Class.attr`)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_code_name_a_document_gives_exists(doc):
    """Each dotted code name in backticks (`stream_rater.x.y`, or `x.y` within the package)
    is a module of the package or an attribute of one."""
    missing = sorted(n for n in code_names((ROOT / doc).read_text()) if not resolves(n))
    assert not missing, f"{doc} names code that does not exist: {missing}"


def test_the_code_name_check_sees_a_missing_name():
    """The check is not vacuous: made-up names fail, real ones pass, settings are not code."""
    assert code_names("`events.match_key`, `min.insync.replicas`, `ladders.toml`") == {
        "stream_rater.events.match_key"
    }
    assert not resolves("stream_rater.events.match_key")
    assert not resolves("stream_rater.service.pipeline.NoSuchPipeline")
    assert resolves("stream_rater.service.pipeline.BatchPipeline")


@pytest.mark.parametrize("doc", DOCS)
def test_every_command_a_document_runs_exists(doc):
    """Each `stream-rater <command>` a document names (prose or example) is a command of the
    parser, and each `stream-rater bench <name>` a benchmark."""
    commands = subcommands(build_parser())
    text = (ROOT / doc).read_text()
    named = set(re.findall(r"stream-rater ([a-z][a-z0-9-]*)", text))
    assert named <= set(commands), f"{doc} names no such command: {sorted(named - set(commands))}"
    benches = set(re.findall(r"stream-rater bench ([a-z][a-z0-9-]*)", text))
    bench_choices = set(subcommands(commands["bench"]))
    assert benches <= bench_choices, f"{doc} names no such benchmark: {sorted(benches - bench_choices)}"


#: Where an example names a ladder: a flag, a read-API URL, a JSON field.
LADDER_USES = (r"--ladder[ =]([a-z0-9-]+)", r"/api/ladders/([a-z0-9-]+)/", r'"ladder": "([a-z0-9-]+)"')


def defined_ladders(block: str) -> set[str]:
    """The ladders a code block configures: TOML tables, environment variables (whose name
    is lower-cased with `_` as `-`, as `stream_rater.config.ladders` reads them), and an
    offline command's own ladder (``--ladder L --model M``: replay, evaluate, tune)."""
    toml = set(re.findall(r"^\[ladders\.([a-z0-9-]+)\]", block, flags=re.MULTILINE))
    env = {
        n.lower().replace("_", "-") for n in re.findall(r"STREAM_RATER_LADDER_([A-Z0-9_]+?)(?:__|=)", block)
    }
    offline = set(re.findall(r"--ladder[ =]([a-z0-9-]+) --model ", block))
    return toml | env | offline


def test_every_ladder_an_example_uses_exists():
    """Each ladder an example of the user's guide uses is `dev`'s `default`, one of the
    tutorial's ladders (so the example runs against the tutorial's `dev`) or one the same
    example configures."""
    tutorial = set().union(*map(defined_ladders, code_blocks(page("tutorial.md"))))
    assert tutorial, "the tutorial configures no ladder"
    for doc in GUIDE:
        for block in code_blocks(doc.read_text()):
            used = {name for pattern in LADDER_USES for name in re.findall(pattern, block)}
            unknown = used - tutorial - defined_ladders(block) - {"default"}
            assert not unknown, (
                f"an example of {doc.name} uses ladders dev does not have: {sorted(unknown)}\n{block}"
            )


def openapi_paths() -> list[re.Pattern[str]]:
    """The paths of openapi.yaml, each as a pattern of the concrete URL paths it serves."""
    spec = yaml.safe_load((ROOT / "stream_rater" / "service" / "openapi.yaml").read_text())
    return [re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(path))) for path in spec["paths"]]


def test_every_api_path_the_guide_names_is_in_openapi():
    """Each read-API URL path the user's guide gives (examples and prose; the query string
    aside) is a path of stream_rater/service/openapi.yaml."""
    paths = openapi_paths()
    text = "\n".join(doc.read_text() for doc in GUIDE)
    named = {p.rstrip(".,") for p in re.findall(r"(/api/[^\s'\"`?)]*)", text)}
    assert named, "the user's guide names no API path"
    unknown = sorted(p for p in named if not any(pattern.fullmatch(p) for pattern in paths))
    assert not unknown, f"the user's guide names API paths openapi.yaml lacks: {unknown}"
