# Settings for train.py (executed into its globals by --config).
lr = 0.2
epochs = 8
hidden = 48
