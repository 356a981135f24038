from nvfabric.cli import main

main()
