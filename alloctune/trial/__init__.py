"""One trial: the processes it runs and what they observe about themselves."""
