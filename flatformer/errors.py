"""One exception type for every problem a user can fix: the command line prints it as one line."""


class FlatformerError(Exception):
    """A problem with the user's input, files or settings, explained in one sentence."""
