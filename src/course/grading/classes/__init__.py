"""Class-scale grading: one student per grading unit, in worker processes or on Dask, and a
coordinator, the only process that writes the gradebook."""
