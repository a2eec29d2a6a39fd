"""What a sweep stores: the records (`records`), the one typed reader (`typed`), the trials file (`trials`) and the results folder (`folder`)."""
