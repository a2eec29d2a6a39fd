"""What a sweep stores: the records (`records`), the one typed reader (`typed`), the trials file (`trials`), the
results folder (`folder`), choice.json's one record per decision (`choices`) and a setting's figures in it
(`figures`), older choice.json schemas read as the current one (`upgrade`), the folder's files that change together
(`batch`), a GPU's driver-call costs (`calibration`), the blocks of an in-process confirmation (`alternation`), a
fit's folder (`fits`), the names of every file in those folders (`names`), the order of settings by memory that
every ranking of them builds on (`order`), where a trace's numbers come from: a GPU, or a dry run for a card
(`provenance`), and the names every command's JSON and words give the same things (`vocabulary`)."""
