"""What a sweep runs: workload files (`loader`: the schema and its checks, giving the frozen WorkloadSpec of `spec`),
the user's own command (`command`) and the built-in workload kinds (`builtin`)."""
