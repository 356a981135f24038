"""What Slurm runs on a GB200 tray that nvfabric could not read whole (facts/slurm.py), on
simulated trays: a prolog.d of thousands of scripts, a prolog or slurm.conf over 1 MiB, a file
or directory nvfabric may not read, a hand-off past the depth bound, a compiled prolog, a link
out of the root. The owner is then unknown, never ``none``: ``imex owner`` and ``status`` warn
(``imex_owner_unknown``), ``run`` and ``install --from`` refuse, ``--imex-owner`` is the way
out. Prologs slurmd cannot run (a missing file, a loop of links, a directory) are said, and
the evidence names the file and line each setting was read at (slurm.conf, an ``Include``,
nvfabric's prolog settings)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvfabric.facts import slurm as slurm_facts
from nvfabric.facts.imex import tray as imex_facts
from nvfabric.rules.imex import script as script_rules
from nvfabric.rules.imex.owner import decide
from nvfabric.rules.imex.slurm import conf_lines, parse_conf
from nvfabric.rules.imex.tables import SLURM_MAX_GLOB, SLURM_MAX_SCRIPT_BYTES, SLURM_MAX_SCRIPTS
from tests.artifacts.test_debinstall import cached_imex
from tests.artifacts.test_debinstall import runfile_tray as runfile_tray  # noqa: F401 - fixture
from tests.cli.test_run_mnnvl import tray as run_tray
from tests.conftest import run_json
from tests.facts.imex.test_tray import PROLOG, link, put

#: A site prolog.d scriptlet that does nothing to IMEX (Slurm runs prologs without a PATH).
HARMLESS = ('#!/bin/sh\n/usr/bin/logger -t prolog "job $SLURM_JOB_ID"\n'
            '[ -d /scratch ] && mkdir -p "/scratch/$SLURM_JOB_USER"\n')
RESTART = "#!/bin/sh\nsystemctl restart nvidia-imex.service\n"


@pytest.fixture
def tray(node: Callable[..., Path]) -> Path:
    return node("gb200-tray")


def many(root: Path, directory: str, count: int) -> None:
    d = root / directory
    d.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (d / f"{i:05d}-site.sh").write_text(HARMLESS)


def owner(root: Path, *args: str) -> tuple[dict[str, object], int]:
    return run_json("imex", "owner", "--root", str(root), *args)


def codes(out: dict[str, object]) -> dict[str, str]:
    findings = out["findings"]
    assert isinstance(findings, list)
    return {f["code"]: f["severity"] for f in findings}


# -- thousands of scripts: all read; past the bound the owner is unknown ----------------------

def test_thousands_of_prolog_scripts_are_read_and_the_last_one_restarts_the_unit(
        tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.d/*\n", 0o644)
    many(tray, "etc/slurm/prolog.d", 3000)
    put(tray, "etc/slurm/prolog.d/9999-imex.sh", RESTART)
    out, rc = owner(tray)
    assert (out["owner"], out["runner"], rc) == ("slurm", "unit", 0)
    # run starts no second daemon beside the prolog's unit
    dry, rc = run_json("run", "--dry-run", "--root", str(tray))
    assert rc == 0 and dry["processes"] == [], dry


def test_past_the_file_and_glob_bounds_the_owner_is_unknown_and_run_refuses(
        tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/a/*,/etc/slurm/b/*\n", 0o644)
    many(tray, "etc/slurm/a", SLURM_MAX_GLOB + 1)  # one past the glob's bound
    many(tray, "etc/slurm/b", SLURM_MAX_SCRIPTS - SLURM_MAX_GLOB + 1)  # one past the files'
    ev = imex_facts.gather_evidence(str(tray))
    assert ev.slurm.scripts == ()
    assert any(f"1 matches past the first {SLURM_MAX_GLOB}" in u for u in ev.slurm.unread)
    assert any(f"{SLURM_MAX_SCRIPTS} files read (the bound): 1 more not read" in u
               for u in ev.slurm.unread)
    decision = decide(ev)
    assert decision.owner == "unknown" and decision.unknown is not None
    assert decision.unknown.severity == "warning"
    assert "--imex-owner slurm" in decision.unknown.hint
    for_run = decide(ev, for_run=True)
    assert (for_run.owner, for_run.nvfabric_starts_imex) == ("unknown", False)
    assert for_run.refusal is not None and for_run.refusal.severity == "error"
    dry, rc = run_json("run", "--dry-run", "--root", str(tray))
    assert rc == 1 and codes(dry) == {"imex_owner_unknown": "error"}, dry
    assert dry["processes"] == []


# -- a prolog over 1 MiB: cut, said, the owner unknown -----------------------------------------

def big_prolog(tray: Path) -> None:
    pad = "# site notes\n" * (SLURM_MAX_SCRIPT_BYTES // 13 + 1)
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.sh\n", 0o644)
    put(tray, "etc/slurm/prolog.sh", "#!/bin/sh\n" + pad + "systemctl restart nvidia-imex\n")


def test_a_prolog_over_one_mib_is_cut_said_and_leaves_the_owner_unknown(
        tmp_path: Path) -> None:
    tray = run_tray(tmp_path)  # with its nvidia-smi: status reads the fabric
    big_prolog(tray)
    out, rc = owner(tray)
    assert (out["owner"], rc) == ("unknown", 0)  # a warning: the checked thing is not bad
    assert codes(out) == {"imex_owner_unknown": "warning"}
    assert ("Slurm: not read: /etc/slurm/slurm.conf:1: Prolog=/etc/slurm/prolog.sh => "
            "/etc/slurm/prolog.sh: larger than 1 MiB: only its start read") in out["evidence"]
    status, _ = run_json("status", "--root", str(tray))
    assert status["imex"]["owner"] == "unknown"
    assert codes(status).get("imex_owner_unknown") == "warning"
    dry, rc = run_json("run", "--dry-run", "--root", str(tray))
    assert rc == 1 and "imex_owner_unknown" in codes(dry)
    # the operator names the owner: nothing is refused, nvfabric leaves IMEX to the prolog
    named, rc = run_json("run", "--dry-run", "--root", str(tray), "--imex-owner", "slurm")
    assert rc == 0 and named["processes"] == [], named
    out, rc = owner(tray, "--imex-owner", "slurm")
    assert (out["owner"], out["unknown"], rc) == ("slurm", None, 0)


def test_install_from_refuses_to_set_the_unit_for_an_owner_not_known(
        runfile_tray: Path, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    big_prolog(runfile_tray)
    cached_imex(tmp_path / "debs", "580.126.20-1ubuntu1", "nvidia-modprobe")
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root",
                       str(runfile_tray), "--dry-run")
    assert rc == 1 and out["error"]["code"] == "imex_owner_unknown", out
    named, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root",
                         str(runfile_tray), "--dry-run", "--imex-owner", "slurm")
    assert rc == 0, named
    assert named["imex_unit"]["owner"] == "slurm"


def test_a_slurm_conf_over_one_mib_is_said(tray: Path) -> None:
    nodes = "".join(f"NodeName=gb{i:05d} CPUs=144 RealMemory=880000\n" for i in range(30000))
    put(tray, "etc/slurm/slurm.conf", nodes + "Prolog=/etc/slurm/p.sh\n", 0o644)
    facts = slurm_facts.read(str(tray))
    assert facts.unread == ("/etc/slurm/slurm.conf: larger than 1 MiB: only its start read",)


def test_a_slurm_conf_over_one_mib_of_fewer_characters_is_said(tray: Path) -> None:
    # bytes are the bound, not characters: a site's comments in UTF-8 (3 bytes a character)
    notes = "# Übersicht der Knoten: ─────────────────────────\n" * 15000
    put(tray, "etc/slurm/slurm.conf", notes + "Prolog=/etc/slurm/p.sh\n", 0o644)
    assert len(notes) < SLURM_MAX_SCRIPT_BYTES < len(notes.encode())
    assert slurm_facts.read(str(tray)).unread == (
        "/etc/slurm/slurm.conf: larger than 1 MiB: only its start read",)


# -- what nvfabric may not read (an operator without root; root reads through file modes) -------

@pytest.fixture
def deny(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """``deny(path)``: make ``path`` unreadable to nvfabric (mode 000). Root reads through
    file modes, so under root the kernel's answer is given as it would be to another user:
    EACCES from open(2) and from listing a directory, access(2) false."""
    denied: set[str] = set()
    real_open, real_access, real_scandir = os.open, os.access, os.scandir

    def fake_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if os.fspath(path) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kw)

    def fake_access(path: Any, mode: int, *args: Any, **kw: Any) -> bool:
        return os.fspath(path) not in denied and real_access(path, mode, *args, **kw)

    def fake_scandir(path: Any = ".") -> Any:
        if os.fspath(path) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_scandir(path)

    def make(path: Path) -> None:
        path.chmod(0)
        if os.geteuid() == 0:
            denied.add(str(path))
            monkeypatch.setattr(os, "open", fake_open)
            monkeypatch.setattr(os, "access", fake_access)
            monkeypatch.setattr(os, "scandir", fake_scandir)

    yield make
    for path in denied:
        Path(path).chmod(0o755)


def test_a_prolog_nvfabric_may_not_read_leaves_evidence_and_the_owner_unknown(
        tray: Path, deny: Callable[[Path], None]) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.d/*\n", 0o644)
    put(tray, "etc/slurm/prolog.d/10-site.sh", HARMLESS)
    deny(put(tray, "etc/slurm/prolog.d/50-imex.sh", RESTART))
    ev = imex_facts.gather_evidence(str(tray))
    assert ev.slurm.unread == ("/etc/slurm/slurm.conf:1: Prolog=/etc/slurm/prolog.d/* => "
                               "/etc/slurm/prolog.d/50-imex.sh: nvfabric may not read it "
                               "(Permission denied)",)
    decision = decide(ev)
    assert decision.owner == "unknown"
    assert decision.unknown is not None and "50-imex.sh" in decision.unknown.message


def test_a_slurm_conf_nvfabric_may_not_read_is_no_missing_slurm(
        tray: Path, deny: Callable[[Path], None]) -> None:
    deny(put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/p.sh\n", 0o644))
    facts = slurm_facts.read(str(tray))
    assert facts.conf == "/etc/slurm/slurm.conf"
    assert facts.unread == ("/etc/slurm/slurm.conf: nvfabric may not read it "
                            "(Permission denied)",)
    assert decide(imex_facts.gather_evidence(str(tray))).owner == "unknown"


def test_an_include_nvfabric_may_not_read_is_said(tray: Path,
                                                  deny: Callable[[Path], None]) -> None:
    put(tray, "etc/slurm/slurm.conf", "Include /etc/slurm/prolog.conf\n", 0o644)
    deny(put(tray, "etc/slurm/prolog.conf", "Prolog=/etc/slurm/p.sh\n", 0o644))
    assert slurm_facts.read(str(tray)).unread == (
        "/etc/slurm/slurm.conf: Include /etc/slurm/prolog.conf: nvfabric may not read it "
        "(Permission denied)",)


def test_a_prolog_directory_nvfabric_may_not_list_is_unread_not_empty(
        tray: Path, deny: Callable[[Path], None]) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.d/*\n", 0o644)
    put(tray, "etc/slurm/prolog.d/50-imex.sh", RESTART)
    deny(tray / "etc/slurm/prolog.d")
    facts = slurm_facts.read(str(tray))
    assert facts.notes == ()  # not "matches no file": nvfabric cannot tell
    assert facts.unread == ("/etc/slurm/slurm.conf:1: Prolog=/etc/slurm/prolog.d/*: nvfabric "
                            "may not search /etc/slurm/prolog.d (Permission denied)",)


# -- other bounds and things not read -------------------------------------------------------------

def test_a_hand_off_past_the_depth_bound_leaves_the_owner_unknown(tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/p0\n", 0o644)
    for i in range(12):
        put(tray, f"etc/slurm/p{i}", f"#!/bin/sh\nexec /etc/slurm/p{i + 1}\n")
    put(tray, "etc/slurm/p12", RESTART)
    assert decide(imex_facts.gather_evidence(str(tray))).owner == "unknown"


def test_a_compiled_prolog_is_not_read_but_programs_a_script_runs_are_no_gap(
        tray: Path) -> None:
    put(tray, "usr/bin/logger", "\x7fELF\x02\x01\x01" + "\0" * 64)
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.d/*\n", 0o644)
    put(tray, "etc/slurm/prolog.d/10-site.sh", HARMLESS)
    ev = imex_facts.gather_evidence(str(tray))
    assert ev.slurm.unread == () and decide(ev).owner == "none"
    put(tray, "etc/slurm/prolog.d/20-site", "\x7fELF\x02\x01\x01" + "\0" * 64)
    ev = imex_facts.gather_evidence(str(tray))
    assert ev.slurm.unread == ("/etc/slurm/slurm.conf:1: Prolog=/etc/slurm/prolog.d/* => "
                               "/etc/slurm/prolog.d/20-site: a binary program: what it does "
                               "is not read",)
    assert decide(ev).owner == "unknown"


def test_a_prolog_link_to_a_file_the_node_lacks_is_said_and_the_readers_file_not_read(
        tray: Path, tmp_path: Path) -> None:
    """A prolog linked to an absolute path: slurmd resolves it on the node, from the root.
    A file of that name outside the tree (the reader's own) is never read; the node has
    none, so slurmd cannot run the prolog, which is said."""
    outside = tmp_path / "elsewhere.sh"
    outside.write_text(RESTART)
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.d/*\n", 0o644)
    link(tray, "etc/slurm/prolog.d/50-imex", str(outside))
    out, rc = owner(tray)
    assert (out["owner"], rc) == ("none", 0)
    facts = slurm_facts.read(str(tray))
    assert facts.notes == (f"/etc/slurm/slurm.conf:1: Prolog=/etc/slurm/prolog.d/*: "
                           f"/etc/slurm/prolog.d/50-imex is a symbolic link to {outside}, "
                           "which does not exist: slurmd cannot run it, so every job's "
                           "prolog fails (the node is drained, the job requeued)",)


def test_a_for_loop_past_its_bound_is_unread_only_when_its_words_are_run(tray: Path) -> None:
    words = " ".join(f"/etc/slurm/s{i}.sh" for i in range(script_rules.MAX_LOOP_WORDS + 1))
    hosts = " ".join(f"gb{i:03d}" for i in range(100))
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/p.sh\n", 0o644)
    put(tray, "etc/slurm/p.sh", f"#!/bin/sh\nfor h in {hosts}; do echo $h; done\n")
    assert slurm_facts.read(str(tray)).unread == ()
    put(tray, "etc/slurm/p.sh", f'#!/bin/sh\nfor f in {words}; do "$f"; done\n')
    (unread,) = slurm_facts.read(str(tray)).unread
    assert unread.endswith(f"/etc/slurm/p.sh:2: runs each word of a for loop of more than "
                           f"{script_rules.MAX_LOOP_WORDS}: the rest not followed")


# -- evidence names the file and line where each setting was read ---------------------------------

def test_evidence_names_the_included_file_and_its_line(tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "ClusterName=gb\nInclude /etc/slurm/other.conf\n", 0o644)
    put(tray, "etc/slurm/other.conf", "# site\nSlurmdTimeout=300\n\nPrologFlags=Alloc\n"
        "Prolog=/etc/slurm/p.sh\nSwitchType=switch/nvidia_imex\n", 0o644)
    put(tray, "etc/slurm/p.sh", RESTART)
    facts = slurm_facts.read(str(tray))
    (found,) = facts.scripts
    assert found.chain[0] == "/etc/slurm/other.conf:5: Prolog=/etc/slurm/p.sh"
    assert facts.switch == "/etc/slurm/other.conf:6: SwitchType=switch/nvidia_imex"


def test_evidence_names_the_file_of_each_nvfabric_prolog_setting(tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/prolog.d/*\n", 0o644)
    put(tray, "etc/slurm/prolog.d/60-nvfabric-imex", PROLOG.read_text())
    put(tray, "etc/default/nvfabric-slurm", "# site\nNVFABRIC_IMEX_START=unit\n", 0o644)
    (found,) = slurm_facts.read(str(tray)).scripts
    assert found.actions.lines == (
        "/etc/slurm/prolog.d/60-nvfabric-imex: nvfabric's Slurm prolog, NVFABRIC_IMEX_START=unit "
        "(/etc/default/nvfabric-slurm:2), NVFABRIC_IMEX_CHANNEL=auto (the default)",)
    # a dispatcher that exports a setting before it runs the prolog: that script is named
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/mux.sh\n", 0o644)
    put(tray, "etc/slurm/mux.sh", "#!/bin/sh\nexport NVFABRIC_IMEX_CHANNEL=job\n"
        "exec /etc/slurm/prolog.d/60-nvfabric-imex\n")
    (found,) = slurm_facts.read(str(tray)).scripts
    assert found.actions.lines[0].endswith(
        "NVFABRIC_IMEX_CHANNEL=job (set by /etc/slurm/mux.sh)")


# -- prologs slurmd cannot run are said --------------------------------------------------------

def _missing(root: Path) -> None:
    pass


def _loop(root: Path) -> None:
    link(root, "etc/slurm/p.sh", "p2.sh")
    link(root, "etc/slurm/p2.sh", "p.sh")


def _directory(root: Path) -> None:
    (root / "etc/slurm/p.sh").mkdir(parents=True)


def _dangling(root: Path) -> None:
    link(root, "etc/slurm/p.sh", "gone.sh")


@pytest.mark.parametrize(("make", "why"), [
    (_missing, "/etc/slurm/p.sh matches no file"),
    (_loop, "/etc/slurm/p.sh is a loop of symbolic links"),
    (_directory, "/etc/slurm/p.sh is a directory"),
    (_dangling, "/etc/slurm/p.sh is a symbolic link to gone.sh, which does not exist"),
], ids=["missing", "loop", "directory", "dangling"])
def test_a_prolog_slurmd_cannot_run_is_said(tray: Path, make: Callable[[Path], None],
                                            why: str) -> None:
    put(tray, "etc/slurm/slurm.conf", "Prolog=/etc/slurm/p.sh\n", 0o644)
    make(tray)
    out, rc = owner(tray)
    # nothing runs from it, so the owner is decided; the evidence says what slurmd does
    assert (out["owner"], rc) == ("none", 0)
    assert (f"Slurm: /etc/slurm/slurm.conf:1: Prolog=/etc/slurm/p.sh: {why}: slurmd cannot run "
            "it, so every job's prolog fails (the node is drained, the job requeued)"
            in out["evidence"]), out["evidence"]
    assert not any("no Slurm prolog" in r for r in out["reasons"])


def test_an_empty_prolog_glob_is_said(tray: Path) -> None:
    put(tray, "etc/slurm/slurm.conf", "Epilog=/etc/slurm/epilog.d/*\n", 0o644)
    (tray / "etc/slurm/epilog.d").mkdir()
    (note,) = slurm_facts.read(str(tray)).notes
    assert "/etc/slurm/epilog.d/* matches no file" in note
    assert "every job's epilog fails" in note


# -- lines as Slurm's parser joins them (src/common/parse_config.c, _get_next_line) -------------

@pytest.mark.parametrize(("conf", "switch"), [
    # one backslash: SwitchType continues on the next line (read as one line, line 2)
    ("ClusterName=gb\nSwitchType=\\\n  switch/nvidia_imex\n",
     "/etc/slurm/slurm.conf:2: SwitchType=switch/nvidia_imex"),
    # blanks after the backslash: still a continuation (Slurm skips them)
    ("SwitchType=switch/\\  \nnvidia_imex\n",
     "/etc/slurm/slurm.conf:1: SwitchType=switch/nvidia_imex"),
    # two: an escaped backslash ends the line; SwitchType is a line of its own
    ("PrologFlags=Contain,X\\\\\nSwitchType=switch/nvidia_imex\n",
     "/etc/slurm/slurm.conf:2: SwitchType=switch/nvidia_imex"),
    # three: an escaped backslash, then a continuation: SwitchType is part of PrologFlags
    ("PrologFlags=Contain,X\\\\\\\nSwitchType=switch/nvidia_imex\n", None),
    # a comment ending in a backslash continues nothing (comments go first)
    ("# the switch plugin \\\nSwitchType=switch/nvidia_imex\n",
     "/etc/slurm/slurm.conf:2: SwitchType=switch/nvidia_imex"),
    # an escaped '#' is no comment: the value keeps it, the next line is its own
    ("ClusterName=gb\\#1 \\\\# note\nSwitchType=switch/nvidia_imex\n",
     "/etc/slurm/slurm.conf:2: SwitchType=switch/nvidia_imex"),
])
def test_slurm_conf_continuations_are_read_as_slurm_reads_them(
        tray: Path, conf: str, switch: str | None) -> None:
    put(tray, "etc/slurm/slurm.conf", conf, 0o644)
    assert slurm_facts.read(str(tray)).switch == switch


def test_the_line_a_continuation_ends_takes_its_escapes_off() -> None:
    assert conf_lines("A=x\\\\\\\ny\nB=\\#1 # c\n") == [(1, "A=x\\y"), (3, "B=#1 ")]
    items, _ = parse_conf("PrologFlags=Contain,X\\\\\\\nSwitchType=switch/nvidia_imex\n")
    assert [(i.key, i.value, i.line) for i in items] == [
        ("PrologFlags", "Contain,X\\SwitchType=switch/nvidia_imex", 1)]
