"""Pure decisions over recorded trials: statistics (`stats`), per-setting results and the choice (`choice`), rounds of repeats (`rounds`), what a sweep planned (`planned`)."""
