"""``nvfabric simulate``: build a simulated node tree from a profile or a node spec."""

from __future__ import annotations

import os
import stat
from typing import Any

import click

from nvfabric.cli.render import checked_root, console, guarded, json_option, safe
from nvfabric.effects.stdio import print_json
from nvfabric.model.errors import usage_error
from nvfabric.model.strict import load_yaml
from nvfabric.simulate import PROFILES, SpecError, build, parse, profile_spec
from nvfabric.simulate.fakebin import state as fakestate
from nvfabric.simulate.fakes import gpus, install
from nvfabric.simulate.profiles import describe
from nvfabric.simulate.write import clear
from nvfabric.triage import triage
from nvfabric.triage.spec import fabric_states, fake_versions, node_spec

#: Largest node spec read (a spec is a few KB; a case file with its input a few tens).
MAX_SPEC_BYTES = 1 << 20

#: Keys of a field case file (tests/data/cases/README.md in the source tree) around its ``node:``.
CASE_KEYS = frozenset({"id", "title", "command", "node", "input", "options", "expect", "why"})


@click.command()
@click.argument("profile", required=False)
@click.argument("directory", required=False)
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False),
              help="Node spec YAML, or a field case file (its node: is taken); format: "
              "tests/data/cases/README.md in the source tree.")
@click.option("--from-bug-report", "report_file", type=click.Path(dir_okay=False),
              help="An nvidia-bug-report.log(.gz): build the node it describes "
              "(see `nvfabric triage`).")
@click.option("--list", "list_profiles", is_flag=True,
              help="List the built-in profiles, each with the product it is.")
@click.option("--driver-only", is_flag=True,
              help="The driver and its nvidia-smi only: no fabric manager, NVLSM or IMEX "
              "fakes nor their shipped configs (what an image or `nvfabric install` brings).")
@json_option
@guarded
def simulate(profile: str | None, directory: str | None, spec_file: str | None,
             report_file: str | None, list_profiles: bool, driver_only: bool,
             as_json: bool) -> None:
    """Build a node tree: `simulate PROFILE DIR`, `simulate --spec FILE DIR` or
    `simulate --from-bug-report FILE DIR`.

    DIR must be new (in an existing directory) or empty; nothing is written when the spec or
    DIR is refused."""
    if list_profiles:
        _list_alone(profile, directory, spec_file, report_file, driver_only)
        _list_profiles(as_json)
        return
    profile, directory = _arguments(profile, directory, spec_file, report_file)
    notes: list[str] = []
    try:
        if report_file:
            spec, notes, triaged = _from_report(report_file)
            source = report_file
        elif spec_file:
            spec = _from_spec_file(spec_file)
            source = spec_file
        else:
            assert profile is not None
            try:
                spec = profile_spec(profile)
            except SpecError as err:  # not a spec to fix: a name to choose
                raise usage_error(str(err), "`nvfabric simulate --list` names the profiles; "
                                  "or build your own with --spec FILE") from None
            source = profile
        existed = os.path.lexists(directory)
        build(spec, directory)
    except SpecError as err:
        raise usage_error(str(err), "fix the node spec (tests/data/cases/README.md in the "
                          "source tree, \"Node spec\")") from None
    try:
        fakes = install(directory, driver_only=driver_only)
        if report_file:
            states, note = fabric_states(gpus(directory), triaged.gpus)
            fakestate.save(directory, "gpus.json", {"gpus": states})
            notes.append(note)
            keys, said = fake_versions(triaged.extras.get("versions", {}),
                                       triaged.inventory.driver_version)
            fakestate.save(directory, "node.json",
                         {**fakestate.load(directory, "node.json", {}), **keys})
            notes += said
    except BaseException:
        clear(directory, remove_root=not existed)
        raise
    _print(directory, source, fakes, notes if report_file else None, as_json)


def _list_alone(profile: str | None, directory: str | None, spec_file: str | None,
                report_file: str | None, driver_only: bool) -> None:
    """``simulate --list`` takes no argument and builds nothing: a PROFILE, DIR or an option
    of building given with it is a usage error (exit 2) naming them, never silently dropped
    (``simulate --list gb200-tray /tmp/x`` would otherwise print the list and build nothing)."""
    extra = [repr(a) for a in (profile, directory) if a is not None]
    extra += [opt for opt, given in (("--spec", spec_file), ("--from-bug-report", report_file),
                                     ("--driver-only", driver_only)) if given]
    if extra:
        raise usage_error(f"--list takes no argument and no option but --json: got "
                          f"{', '.join(extra)}", "nvfabric simulate --list [--json]; build a "
                          "node with nvfabric simulate PROFILE DIR")


def _list_profiles(as_json: bool) -> None:
    """``simulate --list``: each built-in profile with the product it is
    (:func:`nvfabric.simulate.profiles.describe`), names in one column."""
    products = {name: describe(name, profile_spec(name)) for name in sorted(PROFILES)}
    if as_json:
        print_json({"profiles": sorted(PROFILES), "products": products})
        return
    width = max(map(len, products))
    click.echo("\n".join(f"{name:<{width}}  {text}" for name, text in products.items()))


def _arguments(profile: str | None, directory: str | None, spec_file: str | None,
               report_file: str | None) -> tuple[str | None, str]:
    """(PROFILE, checked DIR) of the command line: with --spec or --from-bug-report the one
    argument is DIR. usage_error on a missing, extra or refused argument."""
    if spec_file and report_file:
        raise usage_error("give either --spec FILE or --from-bug-report FILE, not both",
                          "nvfabric simulate --spec FILE DIR, or --from-bug-report FILE DIR")
    if spec_file or report_file:
        if directory is not None:
            raise usage_error("give either --spec FILE DIR, --from-bug-report FILE DIR or "
                              "PROFILE DIR", "one DIR after --spec FILE or --from-bug-report "
                              "FILE; a PROFILE and a DIR otherwise (simulate --list)")
        directory, profile = profile, None
    if not directory:
        raise usage_error("missing DIR", "nvfabric simulate PROFILE DIR, --spec FILE DIR or "
                          "--from-bug-report FILE DIR")
    try:
        return profile, checked_root(directory)
    except ValueError as err:
        raise usage_error(f"DIR {err}", "give a plain directory path (UTF-8, no control "
                          "characters)") from None


def _from_spec_file(spec_file: str) -> Any:
    """The spec of a node spec file or a field case file's ``node:``; usage_error naming the
    file when it is refused."""
    raw = node_of(load_spec(spec_file), spec_file)
    try:
        return parse(raw)
    except SpecError as err:  # name the file: every reader's error does
        raise usage_error(f"{spec_file}: {err}", "fix the node spec (tests/data/cases/"
                          "README.md in the source tree, \"Node spec\")") from None


def _from_report(report_file: str) -> tuple[Any, list[str], Any]:
    """(spec, notes, triage) of the node an nvidia-bug-report describes
    (:func:`nvfabric.triage.spec.node_spec`); usage_error when the report has no PCI
    functions. Raises SpecError when the spec is refused."""
    triaged = triage(report_file)
    if not triaged.extras.get("pci_known"):
        raise usage_error(
            f"{report_file}: the report has no lspci section (nor the script's sysfs "
            "dump): its PCI functions are unknown, so there is no node to build",
            "ask for the whole nvidia-bug-report.log.gz, written as root")
    raw, notes = node_spec(triaged.inventory)
    for f in triaged.findings:
        if f.code == "report_section_missing" and "plan_blocker" in f.fields:
            # the tree cannot hold "unknown": say that plan on it judges what the
            # report could not tell (no ibstat: LPFs without ports)
            notes.append(f"the report lacks {f.fields['section']}: triage did not "
                         f"judge the plan's {f.fields['plan_blocker']}, but the tree "
                         "is built without it, so plan and detect there judge a "
                         "node that lacks it (their blockers may be this gap)")
    return parse(raw), notes, triaged


def _print(directory: str, source: str, fakes: list[str], notes: list[str] | None,
           as_json: bool) -> None:
    """What was written: the tree, its source, the fakes and (from a bug report) the notes."""
    if as_json:
        out: dict[str, Any] = {"root": directory, "source": source, "fakes": fakes}
        if notes is not None:
            out["notes"] = notes
        print_json(out)
    else:
        con = console()
        con.print(f"simulated node ({safe(source)}) written to {safe(directory)}")
        for note in notes or ():
            con.print(f"  note: {safe(note)}")
        con.print(f"fake daemons and tools in {safe(directory)}/bin "
                  f"({safe(', '.join(os.path.basename(f) for f in fakes))})")


def load_spec(path: str) -> Any:
    """The YAML document of a node spec file. NvfabricError (exit 2) naming the file when it
    is not a regular file, is over :data:`MAX_SPEC_BYTES`, is not UTF-8, or is not YAML
    (:func:`nvfabric.model.strict.load_yaml`: bounded aliases and nesting, every PyYAML failure)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise usage_error(f"cannot read node spec {path}: {err.strerror}",
                          "give a readable YAML node spec file") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise usage_error(f"node spec {path} is not a regular file",
                              "give a YAML node spec file, not a directory or a device")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise usage_error(f"cannot read node spec {path}: {err.strerror}",
                          "give a readable YAML node spec file") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise usage_error(f"node spec {path} is over {MAX_SPEC_BYTES // 1024} KiB",
                          "a node spec is a few KiB: give the spec, not a capture")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise usage_error(
            f"node spec {path} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start})", "give a YAML node spec saved as UTF-8") from None
    return load_yaml(text, f"node spec {path}", "give a YAML node spec "
                     "(tests/data/cases/README.md in the source tree, \"Node spec\")")


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
