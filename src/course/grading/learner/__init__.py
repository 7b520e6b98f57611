"""The learner process: a learner's notebook run as written, in a sandbox of its own, serving
calls of its names to the judge; the course's own answers replaced there by tripwires."""
