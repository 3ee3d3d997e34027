"""What a run learns from: the built-in tasks and your own data (catalog), the reward functions
(rewards) and their worker pool (reward_pool), the untrained baseline (baseline), the models
(models: the tiny model, loading, fetching) and whether the hub can be reached (hub).
May import: util."""
