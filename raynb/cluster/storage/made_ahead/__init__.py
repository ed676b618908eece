"""Files and directories made ahead of need, in ext4 block groups where creating them is cheap: a workaround for a file system, kept apart from the rest."""
