"""One procedure per command, between the command line and the rest: :mod:`.run` (bring the
fabric up and supervise it, every fabric kind), :mod:`.status` (the verdict, and ``wait``),
:mod:`.collect` (the collection of a node: every read a procedure decides on), :mod:`.lock`
(one run per node) and :mod:`.listen` (what watches a run from outside). A procedure reads
once, decides with pure functions, then acts, and returns a value that ``cli/`` renders.
"""
