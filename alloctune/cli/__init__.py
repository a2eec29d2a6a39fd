"""The command line: one module per subcommand, each only parsing arguments into a use case's options (api/), calling
it (or the library part it joins) and rendering what it returns (report/): `sweep`, `record`, `calibrate`, `replay`,
`search`, `export`, `compare`, `report` (decide again), `diagnose`, `fit`, `fleet`. The parser and the one place
errors become exit codes (`main`); shared argument types and helpers (`args`)."""
