"""Drop-in stores for agent frameworks, on berth (each module imports its framework)."""
