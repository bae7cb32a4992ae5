"""The SDFG stage's passes: changes to a built SDFG's maps, before code generation."""
