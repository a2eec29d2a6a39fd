"""What a sweep stores: the records (`records`), the one typed reader (`typed`), the trials file (`trials`), the
results folder (`folder`) and a GPU's driver-call costs (`calibration`)."""
