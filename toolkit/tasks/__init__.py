"""Small reward tasks that train on the built-in model in minutes (used by notebooks and bench/)."""
