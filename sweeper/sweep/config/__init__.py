"""What the user wrote, typed and checked once: the sweeper's settings and schemas, the search space and its
expressions, the trial's config (preset, device), and storage passwords kept out of every output."""
