"""The catalogue's hints typed for the node asked about (nvfabric/data/signatures.yaml, their
placeholders: nvfabric.model.commandline.HINT_PLACEHOLDERS): every hint of every row, rendered
for the node itself, reads as a command line typed there (no placeholder left, no --root);
rendered for another root, every nvfabric command in it carries that --root, every host path
lies under it, and a command only the running host can run says so; fabric manager and IMEX
are started by whoever runs them there."""

from __future__ import annotations

import re
import shlex

import pytest

from nvfabric.model.commandline import HintContext
from nvfabric.rules.catalogue import catalogue
from nvfabric.rules.diagnose import Classifier, render_hint

ROOT = "/tmp/x"

#: Every hint of the catalogue: (where, template).
HINTS = [(f"{sig.id}{where}", o.hint) for sig in catalogue() for where, o in (
    ("", sig.default), *((f".by_fabric.{k}", v) for k, v in sig.by_fabric.items()),
    *((f".by_class.{k}", v) for k, v in (sig.lookup.by_class.items() if sig.lookup else ())))
    if o.hint]

#: Commands that act on the running kernel or service manager: typed on the host.
HOST = {"systemctl", "modprobe", "dmesg", "nvidia-smi", "lspci", "ip", "nvidia-imex-ctl",
        "nvidia-bug-report.sh"}
#: What may follow a pipe (reads the command before it).
FILTERS = {"grep"}
#: Backquoted names that are no commands (``?``: a field the test line does not give).
NAMES = {"?", "ib_umad"}
#: A cluster's commands (the DRA driver's ComputeDomains): typed anywhere.
CLUSTER = {"kubectl"}
#: Hints that name a command for another node (the importing or exporting peer), typed there.
OTHER_NODE = {("imex-export-import", "nvfabric status on the importing node"),
              ("imex-import-failure-status", "nvfabric status there")}

CONTEXTS = {
    "nothing known": HintContext(ROOT),
    "vendor units": HintContext(ROOT, fm_runner="unit", imex_owner="host", imex_runner="unit"),
    "nvfabric runs them": HintContext(ROOT, fm_runner="nvfabric", nvfabric_unit=True,
                                      imex_owner="nvfabric", imex_runner="nvfabric",
                                      imex_config="/run/nvfabric/imex/config.cfg"),
    "dra": HintContext(ROOT, imex_owner="dra"),
}


def _paths(text: str) -> list[str]:
    """The absolute paths written in ``text`` (not ``B200/B300`` or ``10004/10005``)."""
    return re.findall(r"(?<![\w.:/<-])/[\w.-][\w./-]*", text)


def _typed_on_another_root(where: str, text: str, root: str) -> None:
    on_host = f" on the host whose root {root} is"
    for m in re.finditer(r"`([^`]*)`", text):
        clause = text[m.end():].split(";", 1)[0]
        for n, part in enumerate(re.split(r"\|\||&&|\|", m.group(1))):
            argv = shlex.split(part)
            word = argv[0]
            if (where.split(".")[0], m.group(1) + clause) in OTHER_NODE or (
                    where.split(".")[0], m.group(1) + clause.split(",")[0]) in OTHER_NODE:
                continue
            if word == "nvfabric":
                at = argv.index("--root")
                assert argv[at + 1] == root, (where, text)
            elif word == "journalctl":
                assert argv[1:3] == ["--root", root] or on_host in clause, (where, text)
            elif word in HOST:
                assert on_host in clause, (where, m.group(1), text)
            elif word == "ls":
                assert all(p.startswith(root + "/") for p in _paths(part)), (where, text)
            else:
                assert (n > 0 and word in FILTERS) or part.strip() in NAMES \
                    or word in CLUSTER, (where, m.group(1))
    # host paths outside nvfabric's own commands (their options are nvfabric's to resolve
    # under --root: `imex domain --config`)
    bare = re.sub(r"`nvfabric [^`]*`", "", text)
    assert all(p == root or p.startswith(root + "/") for p in _paths(bare)), (where, text)


@pytest.mark.parametrize(("where", "hint"), HINTS, ids=[w for w, _ in HINTS])
def test_a_hint_for_the_node_itself_types_plain_commands(where: str, hint: str) -> None:
    text = render_hint(hint, {}, HintContext())
    assert "{" not in text and "}" not in text, text  # no placeholder left
    assert all("--root" not in span for span in text.split("`")[1::2]), text
    assert "on the host whose root" not in text
    assert all(p.startswith("/") and not p.startswith("/tmp") for p in _paths(text))


@pytest.mark.parametrize("context", sorted(CONTEXTS))
@pytest.mark.parametrize(("where", "hint"), HINTS, ids=[w for w, _ in HINTS])
def test_a_hint_for_another_root_types_every_command_and_path_for_it(
        where: str, hint: str, context: str) -> None:
    text = render_hint(hint, {}, CONTEXTS[context])
    assert "{" not in text and "}" not in text, text
    _typed_on_another_root(where, text, ROOT)


def _hint(line: str, fabric: str, ctx: HintContext) -> str:
    (f,) = Classifier(fabric, hints=ctx).match(line)  # type: ignore[arg-type]
    return f.hint


#: The catalogue's example of the driver's IMEX notify failure (driver-imex-notify).
IMEX_NOTIFY = "[ 1062.114507] NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi"


def test_the_imex_notify_hint_names_whoever_owns_imex() -> None:
    dra = _hint(IMEX_NOTIFY, "mnnvl", HintContext(ROOT, imex_owner="dra"))
    assert "ComputeDomain" in dra and "nvfabric run" not in dra
    unit = _hint(IMEX_NOTIFY, "mnnvl", HintContext(ROOT, imex_owner="host", imex_runner="unit"))
    assert f"`systemctl restart nvidia-imex.service` on the host whose root {ROOT} is" in unit
    assert "nvfabric run" not in unit
    ours = _hint(IMEX_NOTIFY, "mnnvl", HintContext(ROOT, imex_owner="nvfabric",
                                                    imex_runner="nvfabric"))
    assert f"nvfabric runs it (`nvfabric run --root {ROOT}`)" in ours
    unknown = _hint(IMEX_NOTIFY, "mnnvl", HintContext())
    assert "`nvfabric run` becomes its owner" in unknown and "DRA driver or Slurm" in unknown
    assert f"`nvfabric imex owner --root {ROOT}` says who owns it" in dra


def test_fields_inside_a_placeholder_are_filled_and_quoted() -> None:
    sig = next(s for s in catalogue() if s.id == "nvswitch-kernel-version-mismatch")
    (f,) = Classifier("nvswitch", hints=HintContext(ROOT, fm_runner="unit")).match(
        sig.examples[0])
    version = f.fields["kernel_version"]
    assert f"`nvfabric fetch --driver-version {version} --root {ROOT}`" in f.hint
    assert f"`systemctl restart nvidia-fabricmanager.service` on the host whose root {ROOT}" \
        in f.hint
