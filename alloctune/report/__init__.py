"""What users read: deciding a folder and writing it (`analysis`), the reasons in words (`words`, with the known
problems' in `problems`), summary.md (`summary`) and the ranked table (`ranked`), the shared table builders
(`tables`) and the width rule (`layout`), the plot (`plot`), progress (`progress`), replay's and search's output
(`replay`, `search`), comparisons (`compare`, shown by `compare_output`), export formats (`export`)."""
