"""What the notebooks' cells import: the checks and predictions every notebook uses, and each
notebook's own experiments. To change a notebook, start from its line.

    every notebook  checks (expect, passed, observation, stated facts), predictions (none unset)
    01_claims       state_diagrams
    04_recovery     holds (a pass held at a named point), shop (Lucy's policy, approval, money)
    06_explore      fence_checks (the graded admit_generation); resource_fence, stale_sender (the
                    `sending` window); interleavings, wrong_fences, schedule_view (the explorer);
                    renewal
    07_review       shop

05's checkpoint and 06's crash explorer live in `course.checkpoint`; what a kernel ran, in
`course.lab.kernel_runs`.
"""
