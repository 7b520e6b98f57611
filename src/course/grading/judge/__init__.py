"""The judge: decides each graded cell by running the course's check, hidden part included,
against proxies of the learner's names; it never loads learner code and believes only data."""
