"""Where learner code runs while it is graded: bubblewrap sandboxes, their cgroup bounds, and the
reaper that leaves nothing of a submission running."""
