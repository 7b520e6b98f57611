"""What the notebooks' cells import: the checks and predictions every notebook uses, and each
notebook's own experiments. To change a notebook, start from its line.

    every notebook  checks (expect, passed, observation, stated facts), predictions (none unset)
    01_claims       state_diagrams
    01b, 04b        course.lab.learner.saved_definitions (the learner's saved first part: 01's `claim`,
                    04's `order_to_continue`)
    04_recovery     holds (a pass held at a named point), shop (Lucy's policy, approval, money); 04b too
    06_explore      fence_checks (the graded admit_generation); resource_fence, stale_sender (the
                    `sending` window); interleavings, wrong_fences, schedule_view (the explorer);
                    renewal
    07_review       shop

05b's checkpoint and 06's crash explorer live in `course.checkpoint`; what a kernel ran, in
`course.lab.kernel_runs`.
"""
