"""The command line: one module per subcommand, each only parsing arguments into a use case's options (api/), calling
it (or the library part it joins) and rendering what it returns (report/); shared argument types in `args`."""
