"""Lucy's shop: catalogue, assistant worker, and an independent supplier process."""
