"""What a sweep runs: workload files (`spec`), the user's own command (`command`) and the built-in workload kinds (`builtin`)."""
