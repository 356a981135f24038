"""``nvfabric simulate``: build a simulated node tree from a profile or a node spec."""

from __future__ import annotations

import os
import stat
from typing import Any

import click

from ..errors import usage_error
from ..output import console, guarded, json_option, print_json, safe

#: Largest node spec read (a spec is a few KB; a case file with its input a few tens).
MAX_SPEC_BYTES = 1 << 20

#: Keys of a field case file (../shared/cases/README.md) around its ``node:``.
CASE_KEYS = frozenset({"id", "title", "command", "node", "input", "options", "expect", "why"})


@click.command()
@click.argument("profile", required=False)
@click.argument("directory", required=False)
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False),
              help="Node spec YAML, or a field case file (its node: is taken); format: "
              "../shared/cases/README.md.")
@click.option("--list", "list_profiles", is_flag=True, help="List the built-in profiles.")
@json_option
@guarded
def simulate(profile: str | None, directory: str | None, spec_file: str | None,
             list_profiles: bool, as_json: bool) -> None:
    """Build a node tree: `simulate PROFILE DIR` or `simulate --spec FILE DIR`.

    DIR must be new (in an existing directory) or empty; nothing is written when the spec or
    DIR is refused."""
    from ..simulate import PROFILES, SpecError, build, parse, profile_spec
    from ..simulate.fakes import install
    from ..simulate.tree import clear

    if list_profiles:
        if as_json:
            print_json({"profiles": sorted(PROFILES)})
        else:
            click.echo("\n".join(sorted(PROFILES)))
        return
    if spec_file:
        if directory is not None:
            raise usage_error("give either --spec FILE DIR or PROFILE DIR")
        directory, profile = profile, None
    if not directory:
        raise usage_error("missing DIR", "nvfabric simulate PROFILE DIR, or --spec FILE DIR")
    try:
        if spec_file:
            raw = node_of(load_spec(spec_file), spec_file)
            try:
                spec = parse(raw)
            except SpecError as err:  # name the file: every reader's error does
                raise usage_error(f"{spec_file}: {err}") from None
            source = spec_file
        else:
            assert profile is not None
            spec = profile_spec(profile)
            source = profile
        existed = os.path.lexists(directory)
        build(spec, directory)
    except SpecError as err:
        raise usage_error(str(err)) from None
    try:
        fakes = install(directory)
    except BaseException:
        clear(directory, remove_root=not existed)
        raise
    if as_json:
        print_json({"root": directory, "source": source, "fakes": fakes})
    else:
        con = console()
        con.print(f"simulated node ({safe(source)}) written to {safe(directory)}")
        con.print(f"fake daemons and tools in {safe(directory)}/bin "
                  f"({safe(', '.join(os.path.basename(f) for f in fakes))})")


def load_spec(path: str) -> Any:
    """The YAML document of a node spec file. NvfabricError (exit 2) naming the file when it
    is not a regular file, is over :data:`MAX_SPEC_BYTES`, is not UTF-8, or is not YAML
    (:func:`nvfabric.strict.load_yaml`: bounded aliases and nesting, every PyYAML failure)."""
    from ..strict import load_yaml

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise usage_error(f"cannot read node spec {path}: {err.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise usage_error(f"node spec {path} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise usage_error(f"cannot read node spec {path}: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise usage_error(f"node spec {path} is over {MAX_SPEC_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise usage_error(
            f"node spec {path} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start})", "give a YAML node spec saved as UTF-8") from None
    return load_yaml(text, f"node spec {path}", "give a YAML node spec "
                     "(../shared/cases/README.md, \"Node spec\")")


def node_of(raw: Any, path: str) -> Any:
    """The node spec in a loaded file: the file itself, or the ``node:`` of a field case file
    (a mapping with case keys: ``id``, ``command``, ``expect`` ...). A case file without a
    ``node:`` (a fetch or doctor case) has no node to build: NvfabricError (exit 2)."""
    if not isinstance(raw, dict):
        return raw
    if raw.get("node") is not None:
        return raw["node"]
    if set(map(str, raw)) & CASE_KEYS:
        raise usage_error(
            f"{path} is a field case file with no node spec (no `node:` key); "
            "nothing to simulate", "give a case with a node:, or a node spec file")
    return raw
