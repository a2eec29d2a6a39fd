"""What users read, each decision shown from its record (results/choices.ChoiceRecord): a decided folder written and
`--json`'s decisions (`analysis`), the reasons in words (`words`, with the known problems' in `problems`, the
predicted speed's in `predicted` and a growth check's in `growth`), summary.md (`summary`) and the ranked table
(`ranked`), the shared table builders (`tables`) and the width rule (`layout`), the plot (`plot`), progress
(`progress`: phases, and a replay's bars), replay's and search's output (`replay`, `search`), comparisons (`compare`:
rows and columns, its marks' notes in words; shown by `compare_output`), export formats (`export`), fit's and fleet's
output (`fits`, its words on what answers rest on in `fitwords`; `fleet`), a diagnosis as text (`diagnosis`), a
trace's provenance in words (a GPU's recording or a dry run: `provenance`)."""
