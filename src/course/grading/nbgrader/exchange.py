"""nbgrader's collect, with a learner's links left behind: never followed, never copied.

A learner writes their submission folder in the exchange themselves. nbgrader's collect copies it
with `shutil.copytree`, which follows links as the instructor: a link named like a notebook would
bring the solutions in as the learner's work, one to a key would hand its content out with the
feedback, one to /dev/zero or a FIFO would never end. Here a link is skipped, and said so.
"""

from __future__ import annotations

import os
import shutil

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns


class LinkFreeCollect(ExchangeCollect):
    """`nbgrader collect` (and `make collect`) as nbgrader does it, but links stay in the exchange."""

    def do_copy(self, src, dest, log=None):
        if self.get_size(src) > 1000 * self.coursedir.max_dir_size:
            raise RuntimeError(f"Directory size is too big: {src}")
        chosen = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                 max_file_size=self.coursedir.max_file_size, log=self.log)

        def ignore(folder, names):
            links = {name for name in names if os.path.islink(os.path.join(folder, name))}
            for name in sorted(links):
                self.log.warning("Not collected: %s is a link (a submission holds files, not links)",
                                 os.path.join(folder, name))
            return links | set(chosen(folder, sorted(set(names) - links)))

        shutil.copytree(src, dest, ignore=ignore)
