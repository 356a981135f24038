"""PyInstaller's script for ``make dist`` and ``make dist-dir``: the builds start here. Each
part is imported only when it runs: the lean supervisor process holds nothing of the CLI, a
fake daemon nothing of nvfabric but its own modules (nvfabric.effects.frozen)."""

import sys

from nvfabric.effects import frozen

frozen.prepare()
if frozen.supervising(sys.argv):
    from nvfabric.supervisor.lean import main as supervise

    supervise(sys.argv[1:])
if frozen.faking(sys.argv):
    from nvfabric.simulate.fakebin import main as fake

    prog, root = frozen.fake_target(sys.argv[2])
    args = sys.argv[3:]
    sys.argv = [sys.argv[2], *args]
    sys.exit(fake(prog, args, root=root))

from nvfabric.cli import main  # noqa: E402

main(prog_name="nvfabric")
