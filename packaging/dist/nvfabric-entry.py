"""PyInstaller's script for ``make dist``: the single-file binary starts here."""

from nvfabric.frozen import main

main()
