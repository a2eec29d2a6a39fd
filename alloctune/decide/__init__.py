"""Pure decisions from measurements: statistics, the choice, the rounds, the growth check."""
