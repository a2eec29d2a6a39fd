"""What users read: summary.md and tables (`summary`, `tables`), the plot (`plot`), progress (`progress`), comparisons (`compare`), export formats (`export`)."""
