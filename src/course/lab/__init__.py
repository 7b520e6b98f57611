"""The learner's side of the machine: their working copy and JupyterLab (`workspace`, `cleanup`),
what their kernels ran (`kernel_runs`), and their saved notebooks run as written (`learner`,
`graded_cells`), which the checkpoint's workers and the grader both start from."""
