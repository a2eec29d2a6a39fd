"""The command line: one module per subcommand, each only parsing arguments and calling the library; shared argument types in `args`."""
