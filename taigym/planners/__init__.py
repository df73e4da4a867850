"""Classical planners: pure functions task -> plan (DESIGN.md §1). No Gymnasium, no envs."""
