"""Pure decisions over facts: the plan, preflight, the verdict, diagnosis, the IMEX decisions."""
