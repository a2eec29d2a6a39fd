"""Pure decisions over recorded trials: statistics (`stats`), per-setting results (`summary`), the one ordering of
settings (`order`), the choice (`choice`) and its reasons as data (`reasons`), rounds of repeats (`rounds`) and how
precise they got (`precision`), what a sweep planned (`planned`), whether reserved memory keeps growing (`growth`).
No words: report/ says the reasons."""
