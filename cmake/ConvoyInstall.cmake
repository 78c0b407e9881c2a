# Placeholder until packaging lands: install/export rules.
