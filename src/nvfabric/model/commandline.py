"""The commands nvfabric tells the operator to type (a next step, a fix in a hint), built so
that typed as printed they do the same thing as the command that printed them: on the same
root, with the same state directory, from the same download directory.

``--root`` is the one that matters most: without it ``nvfabric install`` after ``fetch --root
IMAGE`` installs into the host's ``/opt/nvfabric``, and ``nvfabric status`` in a container
that runs ``run --root /host`` reads the container. Every printed command line is built here,
shell-quoted (:func:`shlex.join`: an image tree may be ``/srv/img 2``); words written in upper
case (``FILE``, ``DIR``) are placeholders the operator fills in.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

#: The state directory of ``run`` and ``ready`` when ``--state-dir`` is not given.
DEFAULT_STATE_DIR = "/run/nvfabric"


def command_line(*words: str, root: str = "/", state_dir: str | None = None,
                 options: Sequence[tuple[str, str | None]] = (),
                 program: str = "nvfabric") -> str:
    """``nvfabric WORDS [--root ROOT] [--state-dir DIR] [--OPTION VALUE]...`` as one shell
    line: ``--root`` only when ``root`` is not ``/`` (made absolute), ``--state-dir`` only when
    given and not :data:`DEFAULT_STATE_DIR`, each option only when its value is not None (a
    value of ``""`` is a flag without a value). ``program`` may be ``systemctl`` or ``dpkg``,
    whose ``--root`` means the same and comes first (``dpkg --root ROOT -s PACKAGE``);
    nvfabric's options follow its command words. Pure (``os.path.abspath`` aside)."""
    where = ["--root", os.path.abspath(root)] if os.path.abspath(root) != "/" else []
    if state_dir is not None and state_dir != DEFAULT_STATE_DIR:
        where += ["--state-dir", state_dir]
    for flag, value in options:
        if value is not None:
            where += [flag] if value == "" else [flag, value]
    argv = [program, *words, *where] if program == "nvfabric" else [program, *where, *words]
    return " ".join(w if w.isupper() and w.isalpha() else shlex.quote(w) for w in argv)
