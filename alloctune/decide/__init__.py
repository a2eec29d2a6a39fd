"""Pure decisions over recorded trials: the decision's parameters and their defaults (`parameters`), statistics
(`stats`), per-setting results and their figures (`summary`), which device figures are usable and the whole-card rule
(`device`), the choice's preference among settings (`order`), the choice (`choice`) and its reasons as data
(`reasons`, the figures each quotes in `quoted`), the choice as the one record choice.json stores (`record`), a
folder decided (`decision`), what a decision taken again changed (`changed`), which decision stands for export and a
setting picked by hand (`standing`), rounds of repeats and the time budget's stop (`rounds`, their sequential test
`sequential`) and how precise they got (`precision`), how many GPU trials a sweep runs, told before any has
(`estimate`), what a sweep planned (`planned`), a hybrid sweep's finalists (`finalists`), whether reserved memory
keeps growing (`growth`), what a short trial cannot show: known problems for the job's features and the growth check,
as reasons (`safety`), compare's judgement of one cell against another (`regression`), a setting's speed predicted
from its driver work and the GPU's calibration (`speed`), a hybrid sweep's plan from those predictions and its
confirmation pair (`confirm`), that confirmation's blocks in one process (`inprocess`), memory as a curve in a
parameter and the largest value under a limit (`fit`), one setting for many jobs (`fleet`), what a job of several
processes needs per GPU from their traces (`maximum`). No words: report/ says the reasons."""
