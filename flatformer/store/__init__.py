"""The run folder's owner: its layout and file names (layout), the one reader of files from
outside (read), the one writer of files and folders (write), the lock (lock) and a run
folder's config and resume checks (run). No other module parses a checkpoint or seed-folder
name, opens a file a user handed over, or creates a file: they call these."""
