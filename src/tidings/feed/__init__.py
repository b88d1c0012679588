"""The event feed of a conversation: committed journal events and answers in progress, for
watchers in this process and (on PostgreSQL) written in any process of the cluster.

:mod:`~tidings.feed.hub` holds a runtime's drafts and watchers; :mod:`~tidings.feed.watch` is
one watcher; :mod:`~tidings.feed.channel` one watched conversation; :mod:`~tidings.feed.drafts`
the answers in progress; :mod:`~tidings.feed.peers` the other processes' hubs (what they watch
and ask for); :mod:`~tidings.feed.publisher` and :mod:`~tidings.feed.wire` the live messages
between processes.
"""

from tidings.feed.drafts import MESSAGE_DELTA, MESSAGE_DISCARDED, Draft
from tidings.feed.hub import FeedHub
from tidings.feed.watch import Watch

__all__ = ("MESSAGE_DELTA", "MESSAGE_DISCARDED", "Draft", "FeedHub", "Watch")
