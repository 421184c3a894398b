"""The one exception type of the data layer.

Every problem with a dataset on disk -- missing, truncated, corrupt, wrong layout, failed
download -- is raised as :class:`DataError`, whose message names the exact file and says what
to do about it. Callers (the CLI, the experiment runner) can catch this single type and show
the message as is; nothing here ever falls back to random or synthetic data.
"""

from __future__ import annotations

# Repeated at the end of "file not found" messages: the user's real question is usually
# "where does it look?", and the answer has three parts.
DATA_DIR_HINT = (
    "The data directory is --data-dir if given, else $PLASTICLAB_DATA, else the user cache "
    "directory; pass --data-dir or set PLASTICLAB_DATA to use data stored elsewhere."
)


class DataError(RuntimeError):
    """A dataset file is missing, truncated, corrupt or in an unexpected layout.

    The message names the offending path and the remedy (where to download the file, where to
    put it, or that it should be deleted and fetched again).
    """
