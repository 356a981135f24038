"""The docs cannot drift: the site builds strictly (a broken link or anchor, an absolute link, a
page missing from the navigation fail it, and each is shown failing); every command and option
of `nvfabric <command> --help` is on that command's page; the finding codes page is what the
generator writes; the README is a short front door that links only to pages that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from markdown.extensions.toc import slugify

from nvfabric.cli import main
from nvfabric.model.findings import CODES
from tests import docgen
from tests.conftest import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
#: Never with --quiet: mkdocs 1.6 then drops some warnings (an absolute link, a page missing from
#: the navigation) before --strict counts them, and the build passes.
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]
ENV = {"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MKDOCS, "--config-file", str(config), "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=300, check=False, env=ENV)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    proc = _mkdocs(REPO / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "commands" / "run" / "index.html").is_file()


FAULTS = {
    "broken link": ("[x](missing.md)", "is not found among documentation files"),
    "bad anchor": ("[x](index.md#no-such-heading)", "does not contain an anchor"),
    "absolute link": ("[x](/index.md)", "absolute link"),
    "page missing from the navigation": (None, "not included in the \"nav\" configuration"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_strict_build_fails_on(tmp_path: Path, fault: str) -> None:
    """A two-page site with the validation settings of mkdocs.yml: each fault fails it."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n## A heading\n\n[other](other.md#a-heading)\n")
    link, expected = FAULTS[fault]
    (docs / "other.md").write_text(f"# Other\n\n## A heading\n\n{link or '[home](index.md)'}\n")
    nav = [{"Home": "index.md"}] if link is None else [{"Home": "index.md"},
                                                       {"Other": "other.md"}]
    small = {"site_name": "t", "docs_dir": str(docs), "theme": {"name": "mkdocs"},
             "validation": config["validation"], "markdown_extensions": ["toc"], "nav": nav}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small))
    proc = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0 and expected in proc.stdout + proc.stderr, proc.stderr


def _commands() -> list[tuple[list[str], click.Command]]:
    """Every command of the CLI as (path under `nvfabric`, command), groups included."""
    out: list[tuple[list[str], click.Command]] = []

    def walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path[-1] if path else "nvfabric", parent=parent)
        if path:
            out.append((path, cmd))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name], ctx)

    walk(main, [], None)
    return out


def _page(path: list[str]) -> Path:
    return DOCS / "commands" / f"{path[0]}.md"


@pytest.mark.parametrize("path,cmd", _commands(), ids=lambda v: " ".join(v)
                         if isinstance(v, list) else "")
def test_every_command_and_option_is_on_its_page(path: list[str], cmd: click.Command) -> None:
    page = _page(path)
    assert page.is_file(), f"nvfabric {' '.join(path)} has no page {page.relative_to(REPO)}"
    text = page.read_text()
    assert f"nvfabric {' '.join(path)}" in text
    missing = [opt for param in cmd.params if isinstance(param, click.Option)
               for opt in param.opts + param.secondary_opts
               if opt.startswith("--") and opt != "--help" and not re.search(
                   rf"`[^`]*{re.escape(opt)}(?![\w-])", text)]
    assert missing == [], f"{page.relative_to(REPO)} lacks {missing}"


def test_every_command_page_is_a_command() -> None:
    pages = {p.stem for p in (DOCS / "commands").glob("*.md")} - {"index"}
    assert pages == {path[0] for path, _ in _commands()}


def test_the_finding_codes_page_is_what_the_generator_writes() -> None:
    assert (DOCS / "finding-codes.md").read_text() == docgen.render(), (
        "run `make docs-codes` (python -m tests.docgen)")
    assert docgen.main(["--check"]) == 0


def test_every_finding_code_is_on_the_codes_page() -> None:
    text = (DOCS / "finding-codes.md").read_text()
    assert sorted(c for c in CODES if f"| `{c}` |" not in text) == []


def test_a_code_without_a_meaning_fails_the_generator(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = yaml.safe_load(docgen.MEANINGS.read_text())
    del meanings["nvlsm_missing"]
    meanings["no_such_code"] = "x"
    (tmp_path / "codes.yaml").write_text(yaml.safe_dump(meanings))
    monkeypatch.setattr(docgen, "MEANINGS", tmp_path / "codes.yaml")
    with pytest.raises(docgen.DocgenError, match=r"nvlsm_missing.*no_such_code"):
        docgen.render()


def test_the_readme_is_a_short_front_door() -> None:
    assert len(README.read_text().splitlines()) <= 200


def _anchors(page: Path) -> set[str]:
    out = set()
    for line in page.read_text().splitlines():
        if m := re.match(r"^#{1,6} (.*)$", line):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m[1]).replace("`", "")
            out.add(slugify(text, "-"))
    return out


def test_the_readme_links_only_to_docs_pages_that_exist() -> None:
    links = LINK.findall(README.read_text())
    assert links
    for link in links:
        target, _, anchor = link.partition("#")
        assert target.startswith("docs/") and target.endswith(".md"), link
        assert (REPO / target).is_file(), link
        assert not anchor or anchor in _anchors(REPO / target), link


def test_quick_start_has_exactly_the_two_setup_commands() -> None:
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick.split("```sh", 1)[1].split("```", 1)[0]
    commands = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.strip()]
    assert commands == ["make demo", "make test"]


def test_docs_cite_what_a_clone_has() -> None:
    """tests/data/..., never the shared directory beside the checkout; no issue numbers."""
    for page in [README, *DOCS.rglob("*.md")]:
        text = page.read_text()
        assert "../shared" not in text, page
        assert not re.search(r"\bissues? \d+", text), page


def test_mkdocs_is_installed_with_the_dev_extra() -> None:
    assert shutil.which("mkdocs", path=str(Path(sys.executable).parent))
